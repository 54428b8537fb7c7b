/**
 * Global gradient-norm clipping. Each rank passes the part of the gradient it
 * is responsible for: the whole (already all-reduced, replicated) gradient
 * with no group, or its own disjoint slice together with the group holding
 * the other slices (ZeRO-1), whose squared sums are then added with an
 * allReduce. The result is the same norm on every rank.
 */
import type { ProcessGroup } from "@ulysses/collectives";
import { TrainingError } from "./errors.js";

/** L2 norm of `grads[begin, end)`, summed over `group` when the slices are disjoint across it. */
export async function globalGradNorm(
  grads: Float32Array,
  range: { begin: number; end: number } = { begin: 0, end: grads.length },
  group: ProcessGroup | null = null,
): Promise<number> {
  let sum = 0;
  for (let i = range.begin; i < range.end; i++) sum += grads[i]! * grads[i]!;
  if (group && group.size > 1) {
    const total = new Float64Array([sum]);
    await group.allReduce(total, { op: "sum" });
    sum = total[0]!;
  }
  return Math.sqrt(sum);
}

/** Scales grads[begin, end) so the global norm is at most maxNorm; returns the norm before clipping. */
export async function clipGradNorm(
  grads: Float32Array,
  maxNorm: number,
  range: { begin: number; end: number } = { begin: 0, end: grads.length },
  group: ProcessGroup | null = null,
): Promise<number> {
  const norm = await globalGradNorm(grads, range, group);
  if (!Number.isFinite(norm)) throw new TrainingError(`gradient norm is ${norm}: the loss diverged`);
  if (maxNorm > 0 && norm > maxNorm) {
    const scale = maxNorm / (norm + 1e-6);
    for (let i = range.begin; i < range.end; i++) grads[i] *= scale;
  }
  return norm;
}
