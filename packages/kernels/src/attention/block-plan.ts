/**
 * The query-block plan of OrtAttention and the copies between the contract's
 * layout ([batch, seq, heads, headDim]) and the blocked layout the graphs
 * read. It decides which queries and keys each block touches (causal blocks
 * stop at their diagonal, so fully masked key ranges are never visited); it
 * runs no graph.
 *
 * Blocked query layout: [block][batch][heads][rows][headDim], block after
 * block (the last block may be shorter). For one (block, batch, kvHead) the
 * `group` query heads that share the kv head are contiguous, so one graph run
 * sees them as a 2-D [group * rows, headDim] matrix against that kv head's
 * keys: grouped-query attention needs no repeated keys, and dk/dv come out
 * summed over the group by the MatMul itself.
 *
 * Causal blocks start at the first query that attends any key
 * (qStart = max(0, seqQ - seqK)); queries before it attend nothing and get
 * out = 0, logSumExp = -Infinity and zero gradients.
 */
import type { AttentionDims } from "./shapes.js";

export interface QueryBlock {
  /** First query of the block. */
  start: number;
  /** Number of queries. */
  rows: number;
  /** Keys [0, keyEnd) are visited; the last `rows` of them need the causal mask when `diagonal`. */
  keyEnd: number;
  diagonal: boolean;
  /** Offset of the block in the blocked query layout, in rows of headDim (multiply by headDim for floats). */
  rowOffset: number;
}

export interface BlockPlan {
  qStart: number;
  blocks: QueryBlock[];
  /** Rows of the blocked layout: (seqQ - qStart) * batch * heads. */
  totalRows: number;
}

/** Splits the attending queries into blocks of `blockQueries` (the last may be shorter). */
export function planBlocks(dims: AttentionDims, blockQueries: number): BlockPlan {
  const { seqQ, seqK, causal, offset, batch, heads } = dims;
  const qStart = seqK === 0 ? seqQ : causal ? Math.min(seqQ, Math.max(0, -offset)) : 0;
  const blocks: QueryBlock[] = [];
  for (let start = qStart; start < seqQ; start += blockQueries) {
    const rows = Math.min(blockQueries, seqQ - start);
    // Causal: the block's last query attends keys j <= start + rows - 1 + offset.
    const keyEnd = causal ? start + rows + offset : seqK;
    blocks.push({ start, rows, keyEnd, diagonal: causal, rowOffset: (start - qStart) * batch * heads });
  }
  return { qStart, blocks, totalRows: (seqQ - qStart) * batch * heads };
}

/**
 * Copies src [batch, seqQ, heads, headDim] into the blocked layout, times
 * `factor`. When `dot` is given, also writes each row's dot product of src
 * and `dot` (same layout) into `rowDots` (blocked [block][batch][heads][rows]).
 */
export function gatherQueries(
  src: Float32Array,
  dims: AttentionDims,
  plan: BlockPlan,
  dst: Float32Array,
  factor = 1,
  dot?: { other: Float32Array; rowDots: Float32Array },
): void {
  const { seqQ, heads, headDim: d, batch } = dims;
  for (const block of plan.blocks) {
    for (let b = 0; b < batch; b++) {
      for (let i = 0; i < block.rows; i++) {
        const q = block.start + i;
        for (let h = 0; h < heads; h++) {
          const from = ((b * seqQ + q) * heads + h) * d;
          // [b, q, h, :] -> [block][b][h][i][:]
          const row = block.rowOffset + (b * heads + h) * block.rows + i;
          const to = row * d;
          for (let e = 0; e < d; e++) dst[to + e] = src[from + e]! * factor;
          if (dot) {
            let s = 0;
            for (let e = 0; e < d; e++) s += src[from + e]! * dot.other[from + e]!;
            dot.rowDots[row] = s;
          }
        }
      }
    }
  }
}

/** Inverse of gatherQueries: blocked -> dst [batch, seqQ, heads, headDim], times `factor`. Rows before qStart are left as they are. */
export function scatterQueries(src: Float32Array, dims: AttentionDims, plan: BlockPlan, dst: Float32Array, factor = 1): void {
  const { seqQ, heads, headDim: d, batch } = dims;
  for (const block of plan.blocks) {
    for (let b = 0; b < batch; b++) {
      for (let i = 0; i < block.rows; i++) {
        const q = block.start + i;
        for (let h = 0; h < heads; h++) {
          const to = ((b * seqQ + q) * heads + h) * d;
          // [block][b][h][i][:] -> [b, q, h, :]
          const from = (block.rowOffset + (b * heads + h) * block.rows + i) * d;
          for (let e = 0; e < d; e++) dst[to + e] = src[from + e]! * factor;
        }
      }
    }
  }
}

/** Blocked row values [block][batch][heads][rows] -> dst [batch, heads, seqQ]; rows before qStart get `fill`. */
export function scatterRowValues(src: Float32Array, dims: AttentionDims, plan: BlockPlan, dst: Float32Array, fill: number): void {
  const { seqQ, heads, batch } = dims;
  for (let bh = 0; bh < batch * heads; bh++) dst.fill(fill, bh * seqQ, bh * seqQ + plan.qStart);
  for (const block of plan.blocks) {
    for (let bh = 0; bh < batch * heads; bh++) {
      // [block][b][h][0:rows] -> [b, h, start:start+rows]
      const from = block.rowOffset + bh * block.rows;
      dst.set(src.subarray(from, from + block.rows), bh * seqQ + block.start);
    }
  }
}

/** Row values dst [batch, heads, seqQ] -> blocked [block][batch][heads][rows] (the inverse of scatterRowValues). */
export function gatherRowValues(src: Float32Array, dims: AttentionDims, plan: BlockPlan, dst: Float32Array): void {
  const { seqQ, heads, batch } = dims;
  for (const block of plan.blocks) {
    for (let bh = 0; bh < batch * heads; bh++) {
      const from = bh * seqQ + block.start;
      dst.set(src.subarray(from, from + block.rows), block.rowOffset + bh * block.rows);
    }
  }
}

/**
 * Swaps the middle axes: src [outer, a, b, inner] -> dst [outer, b, a, inner]
 * (k/v [batch, seqK, kvHeads, d] <-> [batch, kvHeads, seqK, d]). Plain loops:
 * rows are short (headDim), where per-row subarray copies cost more than they move.
 */
export function swapMiddleAxes(src: Float32Array, outer: number, a: number, b: number, inner: number, dst: Float32Array): Float32Array {
  for (let o = 0; o < outer; o++) {
    const base = o * a * b * inner;
    for (let i = 0; i < a; i++) {
      for (let j = 0; j < b; j++) {
        const from = base + (i * b + j) * inner;
        const to = base + (j * a + i) * inner;
        for (let e = 0; e < inner; e++) dst[to + e] = src[from + e]!;
      }
    }
  }
  return dst;
}
