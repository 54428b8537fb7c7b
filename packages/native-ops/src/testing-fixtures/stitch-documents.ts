/**
 * The independent references of the document-masking tests: attention with
 * packed documents computed by running every (batch row, document) pair as
 * its own attention problem without documents, then stitching the pieces
 * back into the packed layout. Keys of a document no query belongs to get
 * zero gradients; their rows stay 0.
 *
 * Stitching equals document masking, causal included, when each document's
 * queries end where its keys end (query i is key i + seqK - seqQ, as on one
 * device or in all-gather-KV): then a document's own bottom-right causal
 * alignment is the packed one.
 */
import type { AttentionDocuments, LocalAttention } from "@ulysses/kernels";
import { referenceBackward64, referenceForward64 } from "@ulysses/kernels/testing";
import { Tensor } from "@ulysses/tensors";

export interface StitchProblem {
  q: Tensor<"float32">;
  k: Tensor<"float32">;
  v: Tensor<"float32">;
  dOut: Tensor<"float32">;
  documents: AttentionDocuments;
  causal: boolean;
  scale?: number;
}

/** Out, logSumExp, dq, dk, dv in the packed layout (float64 or float32 values). */
export interface Stitched {
  out: Float64Array;
  logSumExp: Float64Array;
  dq: Float64Array;
  dk: Float64Array;
  dv: Float64Array;
}

/** One document of one batch row: its query rows [qlo, qhi) and key rows [klo, khi). */
interface Piece {
  b: number;
  qlo: number;
  qhi: number;
  klo: number;
  khi: number;
}

/** The runs of equal ids in row b of `ids` ([batch * seq]): id -> [lo, hi). */
function runs(ids: Int32Array, b: number, seq: number): Map<number, [number, number]> {
  const found = new Map<number, [number, number]>();
  for (let i = 0; i < seq; i++) {
    const id = ids[b * seq + i]!;
    const run = found.get(id);
    if (run) run[1] = i + 1;
    else found.set(id, [i, i + 1]);
  }
  return found;
}

function pieces(p: StitchProblem): Piece[] {
  const [batch, seqQ] = p.q.shape as [number, number];
  const seqK = p.k.shape[1]!;
  const out: Piece[] = [];
  for (let b = 0; b < batch; b++) {
    const keys = runs(p.documents.key, b, seqK);
    for (const [id, [qlo, qhi]] of runs(p.documents.query, b, seqQ)) {
      const [klo, khi] = keys.get(id) ?? [0, 0];
      out.push({ b, qlo, qhi, klo, khi });
    }
  }
  return out;
}

/** Rows [lo, hi) of batch row b of t ([batch, seq, heads, headDim]) as [1, hi - lo, heads, headDim]. */
function rows(t: Tensor<"float32">, b: number, lo: number, hi: number): Tensor<"float32"> {
  const [, seq, heads, d] = t.shape as [number, number, number, number];
  const row = heads * d;
  return new Tensor("float32", [1, hi - lo, heads, d], t.data.slice((b * seq + lo) * row, (b * seq + hi) * row));
}

/** Writes src ([1, n, heads, headDim]) into rows [lo, lo + n) of batch row b of dst ([batch, seq, heads, headDim]). */
function putRows(dst: Float64Array, shape: readonly number[], b: number, lo: number, src: ArrayLike<number>): void {
  const [, seq, heads, d] = shape as [number, number, number, number];
  const start = (b * seq + lo) * heads * d;
  for (let x = 0; x < src.length; x++) dst[start + x] = src[x]!;
}

/** Writes src ([1, heads, n]) into columns [lo, lo + n) of batch row b of dst ([batch, heads, seq]). */
function putLogSumExp(dst: Float64Array, heads: number, seq: number, b: number, lo: number, src: ArrayLike<number>): void {
  const n = src.length / heads;
  for (let h = 0; h < heads; h++) for (let i = 0; i < n; i++) dst[(b * heads + h) * seq + lo + i] = src[h * n + i]!;
}

function empty(p: StitchProblem): Stitched {
  const heads = p.q.shape[2]!;
  return {
    out: new Float64Array(p.q.size),
    logSumExp: new Float64Array(p.q.shape[0]! * heads * p.q.shape[1]!),
    dq: new Float64Array(p.q.size),
    dk: new Float64Array(p.k.size),
    dv: new Float64Array(p.k.size),
  };
}

type Parts = { q: Tensor<"float32">; k: Tensor<"float32">; v: Tensor<"float32">; dOut: Tensor<"float32"> };
type PieceResult = { out: ArrayLike<number>; logSumExp: ArrayLike<number>; dq: ArrayLike<number>; dk: ArrayLike<number>; dv: ArrayLike<number> };

async function stitch(p: StitchProblem, solve: (parts: Parts) => Promise<PieceResult>): Promise<Stitched> {
  const result = empty(p);
  const [, seqQ, heads] = p.q.shape as [number, number, number];
  for (const piece of pieces(p)) {
    const { b, qlo, qhi, klo, khi } = piece;
    const parts = { q: rows(p.q, b, qlo, qhi), k: rows(p.k, b, klo, khi), v: rows(p.v, b, klo, khi), dOut: rows(p.dOut, b, qlo, qhi) };
    const r = await solve(parts);
    putRows(result.out, p.q.shape, b, qlo, r.out);
    putRows(result.dq, p.q.shape, b, qlo, r.dq);
    putRows(result.dk, p.k.shape, b, klo, r.dk);
    putRows(result.dv, p.k.shape, b, klo, r.dv);
    putLogSumExp(result.logSumExp, heads, seqQ, b, qlo, r.logSumExp);
  }
  return result;
}

/** The float64 reference (referenceForward64 / referenceBackward64 of @ulysses/kernels), one document at a time. */
export function stitchedReference64(p: StitchProblem): Promise<Stitched> {
  return stitch(p, async ({ q, k, v, dOut }) => {
    const [, seqQ, heads, headDim] = q.shape as [number, number, number, number];
    const [, seqK, kvHeads] = k.shape as [number, number, number];
    const dims = {
      batch: 1,
      seqQ,
      seqK,
      heads,
      kvHeads,
      headDim,
      group: heads / kvHeads,
      scale: p.scale ?? 1 / Math.sqrt(headDim),
      causal: p.causal,
      offset: seqK - seqQ,
    };
    const f64 = (t: Tensor<"float32">) => Float64Array.from(t.data);
    const forward = referenceForward64(f64(q), f64(k), f64(v), dims);
    return { ...forward, ...referenceBackward64(f64(q), f64(k), f64(v), f64(dOut), dims) };
  });
}

/** `attention` without documents, one document at a time (its float32 results widened). */
export function stitchedAttention(p: StitchProblem, attention: LocalAttention): Promise<Stitched> {
  return stitch(p, async ({ q, k, v, dOut }) => {
    const options = { causal: p.causal, scale: p.scale };
    const { out, logSumExp } = await attention.forward(q, k, v, options);
    const g = await attention.backward(q, k, v, out, dOut, logSumExp, options);
    return { out: out.data, logSumExp: logSumExp.data, dq: g.dq.data, dk: g.dk.data, dv: g.dv.data };
  });
}
