/**
 * Which keys each of OrtAttention's runs visits, and how it masks them: one
 * span per (query block, batch row). Without documents it is the block's
 * causal plan (keys [0, keyEnd), the diagonal square masked when causal),
 * the same for every row. With packed documents (`documents.ts`) a block's
 * queries attend one contiguous span of keys, so a run visits only that
 * span: 8 documents of 1024 tokens cost about 8 attentions of 1024, not one
 * of 8192. A block inside one document needs no bias: "full" (non-causal:
 * every query attends the whole span) or the causal diagonal variants
 * shifted to the document's first key. Only blocks that straddle a document
 * boundary run "masked" with a bias built here; their backward tiles are
 * classified one by one (none: skipped, all: "full", some: "masked").
 */
import type { BlockVariant } from "./block-graphs.js";
import { MASKED } from "./block-graphs.js";
import type { BlockPlan, QueryBlock } from "./block-plan.js";
import { keySpan, tileVisibility, type KeyRanges } from "./documents.js";
import type { AttentionDims } from "./shapes.js";

export interface BlockSpan {
  /** Keys [start, end) are fed to the run. */
  start: number;
  end: number;
  /** How the run masks them; "empty": no query of the block attends a key in this row, so nothing runs. */
  variant: BlockVariant | "empty";
}

/** A backward key tile: keys [start, start + length) and the graph variant it runs. */
export interface SpanTile {
  start: number;
  length: number;
  /** The causal diagonal square (length = block.rows), which needs the triangle mask. */
  diagonal: boolean;
  variant: "full" | "diagonalOnly" | "masked";
}

function causalSpan(block: QueryBlock, start: number, end: number): BlockSpan {
  return { start, end, variant: end - start === block.rows ? "diagonalOnly" : "diagonal" };
}

/** Whether every query of the block attends [span.start, i + offset + 1): the causal diagonal, shifted to span.start. */
function isStaircase(ranges: KeyRanges, dims: AttentionDims, b: number, block: QueryBlock, start: number): boolean {
  for (let i = block.start; i < block.start + block.rows; i++) {
    const at = b * dims.seqQ + i;
    if (ranges.start[at] !== start || ranges.end[at] !== i + dims.offset + 1) return false;
  }
  return true;
}

function documentSpan(ranges: KeyRanges, dims: AttentionDims, b: number, block: QueryBlock): BlockSpan {
  const span = keySpan(ranges, b, block.start, block.start + block.rows);
  if (span.start === span.end) return { start: 0, end: 0, variant: "empty" };
  if (span.dense) return { start: span.start, end: span.end, variant: "full" };
  if (dims.causal && isStaircase(ranges, dims, b, block, span.start)) return causalSpan(block, span.start, span.end);
  return { start: span.start, end: span.end, variant: "masked" };
}

/** The spans of a plan, block-major: spans[blockIndex * batch + b]. `ranges` from documentRanges when there are documents. */
export function planSpans(dims: AttentionDims, plan: BlockPlan, ranges?: KeyRanges): BlockSpan[] {
  const spans: BlockSpan[] = [];
  for (const block of plan.blocks) {
    const plain: BlockSpan = block.diagonal ? causalSpan(block, 0, block.keyEnd) : { start: 0, end: block.keyEnd, variant: "full" };
    for (let b = 0; b < dims.batch; b++) spans.push(ranges === undefined ? plain : documentSpan(ranges, dims, b, block));
  }
  return spans;
}

/**
 * The backward's key tiles of a span, at most `tileKeys` keys each: the
 * causal variants' last `block.rows` keys form their own "diagonalOnly"
 * tile; a "masked" span's tiles are skipped when no query attends them, and
 * need no bias when every query attends all of them.
 */
export function spanTiles(span: BlockSpan, block: QueryBlock, tileKeys: number, ranges: KeyRanges | undefined, b: number): SpanTile[] {
  const causal = span.variant === "diagonal" || span.variant === "diagonalOnly";
  const unmasked = causal ? span.end - block.rows : span.end;
  const tiles: SpanTile[] = [];
  for (let start = span.start; start < unmasked; start += tileKeys) {
    const length = Math.min(tileKeys, unmasked - start);
    if (span.variant !== "masked") {
      tiles.push({ start, length, diagonal: false, variant: "full" });
      continue;
    }
    const seen = tileVisibility(ranges!, b, block.start, block.start + block.rows, start, start + length);
    if (seen !== "none") tiles.push({ start, length, diagonal: false, variant: seen === "all" ? "full" : "masked" });
  }
  if (causal) tiles.push({ start: unmasked, length: block.rows, diagonal: true, variant: "diagonalOnly" });
  return tiles;
}

/** The forward's bias [block.rows, end - start]: 0 where query block.start + i of row b attends key start + j, MASKED elsewhere. */
export function documentBias(ranges: KeyRanges, b: number, block: QueryBlock, start: number, end: number): Float32Array {
  const keys = end - start;
  const bias = new Float32Array(block.rows * keys).fill(MASKED);
  for (let i = 0; i < block.rows; i++) {
    const at = b * ranges.seqQ + block.start + i;
    const low = Math.max(ranges.start[at]!, start) - start;
    const high = Math.min(ranges.end[at]!, end) - start;
    if (high > low) bias.fill(0, i * keys + low, i * keys + high);
  }
  return bias;
}

/** The backward's bias^T [length, block.rows] of keys [start, start + length), written into `into` (reused between tiles). */
export function documentBiasTransposed(ranges: KeyRanges, b: number, block: QueryBlock, start: number, length: number, into: Float32Array): Float32Array {
  const rows = block.rows;
  const biasT = into.subarray(0, length * rows);
  for (let i = 0; i < rows; i++) {
    const at = b * ranges.seqQ + block.start + i;
    const low = ranges.start[at]!;
    const high = ranges.end[at]!;
    // key start + j, query i -> biasT[j * rows + i]
    for (let j = 0; j < length; j++) biasT[j * rows + i] = start + j >= low && start + j < high ? 0 : MASKED;
  }
  return biasT;
}
