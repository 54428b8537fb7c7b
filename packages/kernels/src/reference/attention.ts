/**
 * ReferenceAttention: the living definition of LocalAttention. Plain
 * TypeScript, float64 inside, exact softmax, one query row at a time:
 * deliberately simple (no blocking, no tricks) so the fast kernels can be
 * tested against it. Causal masking is bottom-right aligned: query i attends
 * key j when j <= i + (seqK - seqQ); with `dims.documents` it further attends
 * only keys of its own document (the same id), checked key by key (`attends`,
 * the definition, not the ranges the fast kernels derive from it). A query
 * that attends no key (possible when seqQ > seqK, or when its document has
 * no keys) gets out = 0, logSumExp = -Infinity and zero gradients.
 *
 * The float64 functions work on Float64Arrays in the contract's layout
 * ([batch, seq, heads, headDim]) so finite-difference tests can check the
 * backward without float32 rounding. The backward recomputes the
 * probabilities in float64 from q and k (it validates, but does not read, the
 * float32 out and logSumExp it is given), so it is the exact gradient.
 */
import { Tensor } from "@ulysses/tensors";
import { attentionDims, checkBackwardShapes, type AttentionDims } from "../attention/shapes.js";
import type { AttentionForwardResult, AttentionGradients, AttentionOptions, LocalAttention } from "../attention/types.js";

export interface Forward64 {
  /** [batch, seqQ, heads, headDim] */
  out: Float64Array;
  /** [batch, heads, seqQ] */
  logSumExp: Float64Array;
}

export interface Gradients64 {
  dq: Float64Array;
  dk: Float64Array;
  dv: Float64Array;
}

/** Whether query i of row b attends key j: the contract's definition (the causal limit, then the documents). */
function attends(dims: AttentionDims, b: number, i: number, j: number): boolean {
  if (dims.causal && j > i + dims.offset) return false;
  const documents = dims.documents;
  return documents === undefined || documents.query[b * dims.seqQ + i] === documents.key[b * dims.seqK + j];
}

/** Scratch of one query row: the keys it attends and their probabilities (both of length >= seqK). */
interface Row {
  keys: Int32Array;
  p: Float64Array;
}

function newRow(seqK: number): Row {
  return { keys: new Int32Array(seqK), p: new Float64Array(seqK) };
}

/**
 * Softmax probabilities of query row (b, i, h): row.keys[0..count) are the
 * keys it attends, row.p[0..count) their probabilities; returns
 * [count, logSumExp].
 */
function rowProbabilities(q: Float64Array, k: Float64Array, dims: AttentionDims, b: number, i: number, h: number, row: Row): [number, number] {
  const { seqQ, seqK, heads, kvHeads, headDim: d, scale } = dims;
  const { keys, p } = row;
  let count = 0;
  for (let j = 0; j < seqK; j++) if (attends(dims, b, i, j)) keys[count++] = j;
  if (count === 0) return [0, -Infinity];
  const g = Math.floor(h / dims.group);
  const qOff = ((b * seqQ + i) * heads + h) * d;
  let max = -Infinity;
  for (let n = 0; n < count; n++) {
    const kOff = ((b * seqK + keys[n]!) * kvHeads + g) * d;
    let s = 0;
    for (let e = 0; e < d; e++) s += q[qOff + e]! * k[kOff + e]!;
    s *= scale;
    p[n] = s;
    if (s > max) max = s;
  }
  let sum = 0;
  for (let n = 0; n < count; n++) {
    const e = Math.exp(p[n]! - max);
    p[n] = e;
    sum += e;
  }
  for (let n = 0; n < count; n++) p[n]! /= sum;
  return [count, max + Math.log(sum)];
}

/** Forward in float64. */
export function referenceForward64(q: Float64Array, k: Float64Array, v: Float64Array, dims: AttentionDims): Forward64 {
  const { batch, seqQ, seqK, heads, kvHeads, headDim: d } = dims;
  const out = new Float64Array(batch * seqQ * heads * d);
  const logSumExp = new Float64Array(batch * heads * seqQ);
  const row = newRow(seqK);
  const { keys, p } = row;
  for (let b = 0; b < batch; b++) {
    for (let h = 0; h < heads; h++) {
      const g = Math.floor(h / dims.group);
      for (let i = 0; i < seqQ; i++) {
        const [count, lse] = rowProbabilities(q, k, dims, b, i, h, row);
        logSumExp[(b * heads + h) * seqQ + i] = lse;
        const oOff = ((b * seqQ + i) * heads + h) * d;
        for (let n = 0; n < count; n++) {
          const vOff = ((b * seqK + keys[n]!) * kvHeads + g) * d;
          const pj = p[n]!;
          for (let e = 0; e < d; e++) out[oOff + e]! += pj * v[vOff + e]!;
        }
      }
    }
  }
  return { out, logSumExp };
}

/** Backward in float64: gradients of sum(out * dOut) with respect to q, k, v. */
export function referenceBackward64(q: Float64Array, k: Float64Array, v: Float64Array, dOut: Float64Array, dims: AttentionDims): Gradients64 {
  const { batch, seqQ, seqK, heads, kvHeads, headDim: d, scale } = dims;
  const dq = new Float64Array(q.length);
  const dk = new Float64Array(k.length);
  const dv = new Float64Array(v.length);
  const row = newRow(seqK);
  const { keys, p } = row;
  const dp = new Float64Array(seqK);
  for (let b = 0; b < batch; b++) {
    for (let h = 0; h < heads; h++) {
      const g = Math.floor(h / dims.group);
      for (let i = 0; i < seqQ; i++) {
        const [count] = rowProbabilities(q, k, dims, b, i, h, row);
        const qOff = ((b * seqQ + i) * heads + h) * d;
        // dP_ij = dO_i . v_j; D_i = sum_j P_ij dP_ij (= dO_i . O_i).
        let rowDot = 0;
        for (let n = 0; n < count; n++) {
          const vOff = ((b * seqK + keys[n]!) * kvHeads + g) * d;
          let s = 0;
          for (let e = 0; e < d; e++) s += dOut[qOff + e]! * v[vOff + e]!;
          dp[n] = s;
          rowDot += p[n]! * s;
        }
        for (let n = 0; n < count; n++) {
          const kvOff = ((b * seqK + keys[n]!) * kvHeads + g) * d;
          const pj = p[n]!;
          // dS_ij = P_ij (dP_ij - D_i); the score is scale * q.k.
          const ds = pj * (dp[n]! - rowDot) * scale;
          for (let e = 0; e < d; e++) {
            dv[kvOff + e]! += pj * dOut[qOff + e]!;
            dq[qOff + e]! += ds * k[kvOff + e]!;
            dk[kvOff + e]! += ds * q[qOff + e]!;
          }
        }
      }
    }
  }
  return { dq, dk, dv };
}

function toFloat32(shape: readonly number[], values: Float64Array): Tensor<"float32"> {
  return new Tensor("float32", shape, Float32Array.from(values));
}

export class ReferenceAttention implements LocalAttention {
  readonly name = "reference";

  async forward(q: Tensor<"float32">, k: Tensor<"float32">, v: Tensor<"float32">, options: AttentionOptions): Promise<AttentionForwardResult> {
    const dims = attentionDims(q, k, v, options, "ReferenceAttention.forward");
    const r = referenceForward64(Float64Array.from(q.data), Float64Array.from(k.data), Float64Array.from(v.data), dims);
    return { out: toFloat32(q.shape, r.out), logSumExp: toFloat32([dims.batch, dims.heads, dims.seqQ], r.logSumExp) };
  }

  async backward(
    q: Tensor<"float32">,
    k: Tensor<"float32">,
    v: Tensor<"float32">,
    out: Tensor<"float32">,
    dOut: Tensor<"float32">,
    logSumExp: Tensor<"float32">,
    options: AttentionOptions,
  ): Promise<AttentionGradients> {
    const dims = attentionDims(q, k, v, options, "ReferenceAttention.backward");
    checkBackwardShapes(dims, out, dOut, logSumExp, q, "ReferenceAttention.backward");
    const g = referenceBackward64(Float64Array.from(q.data), Float64Array.from(k.data), Float64Array.from(v.data), Float64Array.from(dOut.data), dims);
    return { dq: toFloat32(q.shape, g.dq), dk: toFloat32(k.shape, g.dk), dv: toFloat32(v.shape, g.dv) };
  }

  /** LocalAttention.release: a no-op, since this implementation holds no sessions or native resources. */
  release(): void {}
}
