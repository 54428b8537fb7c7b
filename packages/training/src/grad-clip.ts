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
  return normOfSums(sumOfSquares(grads, range.begin, range.end), group);
}

/** The sum of the squares of values[begin, end), in float64. */
export function sumOfSquares(values: Float32Array, begin = 0, end = values.length): number {
  // four running sums (elements i mod 4), added at the end: one sum would wait out a float64 addition's latency per element
  let s0 = 0;
  let s1 = 0;
  let s2 = 0;
  let s3 = 0;
  let i = begin;
  for (; i + 4 <= end; i += 4) {
    s0 += values[i]! * values[i]!;
    s1 += values[i + 1]! * values[i + 1]!;
    s2 += values[i + 2]! * values[i + 2]!;
    s3 += values[i + 3]! * values[i + 3]!;
  }
  for (; i < end; i++) s0 += values[i]! * values[i]!;
  return s0 + s1 + (s2 + s3);
}

/** The L2 norm of disjoint parts whose squared sums each rank of `group` gives (null or one rank: this one's alone). */
export async function normOfSums(sumOfSquares: number, group: ProcessGroup | null): Promise<number> {
  let sum = sumOfSquares;
  if (group && group.size > 1) {
    const total = new Float64Array([sum]);
    await group.allReduce(total, { op: "sum" });
    sum = total[0]!;
  }
  return Math.sqrt(sum);
}

/** The factor that brings a gradient of norm `norm` to at most `maxNorm` (1 when it is within it, or maxNorm is 0: off); throws for a norm that is not finite. */
export function clipScaleOf(norm: number, maxNorm: number): number {
  if (!Number.isFinite(norm)) throw new TrainingError(`gradient norm is ${norm}: the loss diverged`);
  return maxNorm > 0 && norm > maxNorm ? maxNorm / (norm + 1e-6) : 1;
}

/** Scales grads[begin, end) so the global norm is at most maxNorm; returns the norm before clipping. */
export async function clipGradNorm(
  grads: Float32Array,
  maxNorm: number,
  range: { begin: number; end: number } = { begin: 0, end: grads.length },
  group: ProcessGroup | null = null,
): Promise<number> {
  const norm = await globalGradNorm(grads, range, group);
  const scale = clipScaleOf(norm, maxNorm);
  if (scale !== 1) for (let i = range.begin; i < range.end; i++) grads[i] *= scale;
  return norm;
}
