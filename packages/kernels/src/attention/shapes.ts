/**
 * The one shape check of the LocalAttention contract (`types.ts`), used by
 * every implementation, in this package and outside it: validates q, k, v
 * (and the backward's out, dOut, logSumExp) and the documents of packed
 * sequences (lengths, int32, ids that never decrease along a row, in one
 * O(n) pass: `documents.ts`), and returns the sizes. It computes nothing.
 * Errors name the call (`who`) and the offending dtype, shape or value; they
 * are KernelErrors unless the caller passes its own package's error factory
 * (FusedAttention throws FusedAttentionErrors this way).
 */
import type { Tensor } from "@ulysses/tensors";
import { KernelError } from "../errors.js";
import { checkDocuments } from "./documents.js";
import type { AttentionDocuments, AttentionOptions } from "./types.js";

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
  /** The checked documents of the options (absent: one document per row); `documentRanges` turns them into key ranges. */
  documents?: AttentionDocuments;
}

/** Makes the error a failed check throws, from its message. */
export type AttentionErrorFactory = (message: string) => Error;

const kernelError: AttentionErrorFactory = (message) => new KernelError(message);

/** "float32 [2, 5, 4, 8]": what a message shows of a tensor. */
function describeTensor(t: Tensor): string {
  return `${t.dtype} [${t.shape.join(", ")}]`;
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

/**
 * Validates the forward inputs against the contract; returns their sizes.
 * `who` names the call in messages ("OrtAttention.forward"); `error` makes
 * the thrown error (default: a KernelError).
 */
export function attentionDims(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: AttentionOptions,
  who: string,
  error: AttentionErrorFactory = kernelError,
): AttentionDims {
  for (const [name, t] of [
    ["q", q],
    ["k", k],
    ["v", v],
  ] as const) {
    if (t.dtype !== "float32") throw error(`${who}: ${name} must be float32, got ${describeTensor(t)}`);
    if (t.rank !== 4) throw error(`${who}: ${name} must be [batch, seq, heads, headDim], got ${describeTensor(t)}`);
  }
  const [batch, seqQ, heads, headDim] = q.shape as [number, number, number, number];
  const [kb, seqK, kvHeads, kd] = k.shape as [number, number, number, number];
  if (kb !== batch || kd !== headDim) {
    throw error(`${who}: k ${describeTensor(k)} does not match q ${describeTensor(q)} in batch or headDim`);
  }
  if (!sameShape(v.shape, k.shape)) throw error(`${who}: v ${describeTensor(v)} does not match k ${describeTensor(k)} (v must have k's shape)`);
  if (kvHeads < 1 || heads % kvHeads !== 0) {
    throw error(`${who}: heads (${heads}) must be a multiple of kvHeads (${kvHeads})`);
  }
  const scale = options.scale ?? 1 / Math.sqrt(headDim);
  if (!Number.isFinite(scale)) throw error(`${who}: scale must be finite, got ${options.scale}`);
  if (options.onCallerThread !== undefined && typeof options.onCallerThread !== "boolean") {
    throw error(`${who}: onCallerThread must be a boolean, got ${String(options.onCallerThread)}`);
  }
  const dims: AttentionDims = { batch, seqQ, seqK, heads, kvHeads, headDim, group: heads / kvHeads, scale, causal: options.causal, offset: seqK - seqQ };
  if (options.documents !== undefined) {
    checkDocuments(options.documents, batch, seqQ, seqK, who, error);
    dims.documents = options.documents;
  }
  return dims;
}

/**
 * Validates the backward's extra inputs against the forward sizes from
 * `attentionDims`: out and dOut shaped like q, logSumExp [batch, heads, seqQ],
 * all float32. `who` and `error` as for attentionDims.
 */
export function checkBackwardShapes(
  dims: AttentionDims,
  out: Tensor,
  dOut: Tensor,
  logSumExp: Tensor,
  q: Tensor,
  who: string,
  error: AttentionErrorFactory = kernelError,
): void {
  for (const [name, t] of [
    ["out", out],
    ["dOut", dOut],
  ] as const) {
    if (t.dtype !== "float32" || !sameShape(t.shape, q.shape)) {
      throw error(`${who}: ${name} must be float32 with q's shape [${q.shape.join(", ")}], got ${describeTensor(t)}`);
    }
  }
  const expected = [dims.batch, dims.heads, dims.seqQ];
  if (logSumExp.dtype !== "float32" || !sameShape(logSumExp.shape, expected)) {
    throw error(`${who}: logSumExp must be float32 [${expected.join(", ")}], got ${describeTensor(logSumExp)}`);
  }
}
