/**
 * Shape checks for FusedAttention's inputs against the LocalAttention
 * contract (packages/kernels/src/attention/types.ts): q [b, seqQ, heads, d],
 * k and v [b, seqK, kvHeads, d] with heads % kvHeads == 0, float32; for the
 * backward, out and dOut shaped like q and logSumExp [b, heads, seqQ].
 * The native op checks the same again; checking here gives errors that name
 * the JavaScript call.
 */
import type { Tensor } from "@ulysses/tensors";
import { FusedAttentionError } from "./errors.js";

export interface Sizes {
  batch: number;
  seqQ: number;
  seqK: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  scale: number;
}

const show = (t: Tensor): string => `${t.dtype} [${t.shape.join(", ")}]`;

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

export function forwardSizes(q: Tensor, k: Tensor, v: Tensor, scale: number | undefined, who: string): Sizes {
  for (const [name, t] of [["q", q], ["k", k], ["v", v]] as const) {
    if (t.dtype !== "float32" || t.rank !== 4) throw new FusedAttentionError(`${who}: ${name} must be float32 [batch, seq, heads, headDim], got ${show(t)}`);
  }
  const [batch, seqQ, heads, headDim] = q.shape as [number, number, number, number];
  const [kb, seqK, kvHeads, kd] = k.shape as [number, number, number, number];
  if (kb !== batch || kd !== headDim || !sameShape(v.shape, k.shape)) {
    throw new FusedAttentionError(`${who}: k ${show(k)} and v ${show(v)} must match each other and q ${show(q)} in batch and headDim`);
  }
  if (kvHeads < 1 || heads % kvHeads !== 0) throw new FusedAttentionError(`${who}: heads (${heads}) must be a multiple of kvHeads (${kvHeads})`);
  const s = scale ?? 1 / Math.sqrt(headDim);
  if (!Number.isFinite(s)) throw new FusedAttentionError(`${who}: scale must be finite, got ${scale}`);
  return { batch, seqQ, seqK, heads, kvHeads, headDim, scale: s };
}

export function checkBackward(sizes: Sizes, q: Tensor, out: Tensor, dOut: Tensor, logSumExp: Tensor, who: string): void {
  for (const [name, t] of [["out", out], ["dOut", dOut]] as const) {
    if (t.dtype !== "float32" || !sameShape(t.shape, q.shape)) throw new FusedAttentionError(`${who}: ${name} must be float32 shaped like q [${q.shape.join(", ")}], got ${show(t)}`);
  }
  const want = [sizes.batch, sizes.heads, sizes.seqQ];
  if (logSumExp.dtype !== "float32" || !sameShape(logSumExp.shape, want)) {
    throw new FusedAttentionError(`${who}: logSumExp must be float32 [${want.join(", ")}], got ${show(logSumExp)}`);
  }
}
