/**
 * Shape checks shared by every LocalAttention implementation: validates q, k,
 * v (and the backward's out, dOut, logSumExp) against the contract in
 * `types.ts` and returns the sizes. It computes nothing.
 */
import type { Tensor } from "@ulysses/tensors";
import { KernelError } from "../errors.js";
import type { AttentionOptions } from "./types.js";

export interface AttentionDims {
  batch: number;
  seqQ: number;
  seqK: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  /** heads / kvHeads: query heads sharing one kv head. */
  group: number;
  scale: number;
  causal: boolean;
  /** Causal offset: query i attends key j when j <= i + offset (offset = seqK - seqQ). */
  offset: number;
}

function shapeOf(t: Tensor): string {
  return `[${t.shape.join(", ")}]`;
}

/** Validates the forward inputs; returns their sizes. */
export function attentionDims(q: Tensor, k: Tensor, v: Tensor, options: AttentionOptions, who: string): AttentionDims {
  for (const [name, t] of [["q", q], ["k", k], ["v", v]] as const) {
    if (t.dtype !== "float32") throw new KernelError(`${who}: ${name} must be float32, got ${t.dtype}`);
    if (t.rank !== 4) throw new KernelError(`${who}: ${name} must be [batch, seq, heads, headDim], got ${shapeOf(t)}`);
  }
  const [batch, seqQ, heads, headDim] = q.shape as [number, number, number, number];
  const [kb, seqK, kvHeads, kd] = k.shape as [number, number, number, number];
  if (kb !== batch || kd !== headDim) {
    throw new KernelError(`${who}: k ${shapeOf(k)} does not match q ${shapeOf(q)} in batch or headDim`);
  }
  if (v.shape.some((d, i) => d !== k.shape[i])) throw new KernelError(`${who}: v ${shapeOf(v)} must have k's shape ${shapeOf(k)}`);
  if (kvHeads < 1 || heads % kvHeads !== 0) {
    throw new KernelError(`${who}: heads (${heads}) must be a multiple of kvHeads (${kvHeads})`);
  }
  const scale = options.scale ?? 1 / Math.sqrt(headDim);
  if (!Number.isFinite(scale)) throw new KernelError(`${who}: scale must be finite, got ${options.scale}`);
  return { batch, seqQ, seqK, heads, kvHeads, headDim, group: heads / kvHeads, scale, causal: options.causal, offset: seqK - seqQ };
}

/** Validates the backward's extra inputs against the forward sizes. */
export function checkBackwardShapes(dims: AttentionDims, out: Tensor, dOut: Tensor, logSumExp: Tensor, q: Tensor, who: string): void {
  for (const [name, t] of [["out", out], ["dOut", dOut]] as const) {
    if (t.dtype !== "float32" || t.shape.length !== 4 || t.shape.some((d, i) => d !== q.shape[i])) {
      throw new KernelError(`${who}: ${name} must be float32 with q's shape ${shapeOf(q)}, got ${t.dtype} ${shapeOf(t)}`);
    }
  }
  const want = [dims.batch, dims.heads, dims.seqQ];
  if (logSumExp.dtype !== "float32" || logSumExp.shape.length !== 3 || logSumExp.shape.some((d, i) => d !== want[i])) {
    throw new KernelError(`${who}: logSumExp must be float32 [${want.join(", ")}], got ${logSumExp.dtype} ${shapeOf(logSumExp)}`);
  }
}
