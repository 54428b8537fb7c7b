/**
 * Packed documents (`AttentionOptions.documents`, `types.ts`): their check,
 * and the keys every query attends, for implementations that skip what the
 * mask hides instead of computing and masking it.
 *
 * Document ids never decrease along a row, so a document's keys are one
 * contiguous range, and so are the keys a query attends: its document's keys
 * cut at the causal limit (j <= i + seqK - seqQ). `documentRanges` gives that
 * range [start, end) for every (row, query), in O(batch * (seqQ + seqK)).
 * Both bounds never decrease along a row, so a tile of consecutive queries
 * attends keys inside one contiguous span (`keySpan`), and a key tile either
 * concerns none of its queries (skip it), all of them whole (no mask), or
 * some (mask): `tileVisibility`. A query whose range is empty (start === end:
 * its document has no keys before the causal limit) attends nothing and gets
 * out = 0, logSumExp = -Infinity and zero gradients, as the contract says of
 * queries without keys.
 */
import type { AttentionDims, AttentionErrorFactory } from "./shapes.js";
import type { AttentionDocuments } from "./types.js";

/** The keys every query attends: query i of row b attends keys [start, end) of row b. */
export interface KeyRanges {
  batch: number;
  seqQ: number;
  /** [batch * seqQ]: the first key each query attends. */
  start: Int32Array;
  /** [batch * seqQ]: one past the last; equal to start when the query attends no key. */
  end: Int32Array;
}

/** The keys a tile of queries attends: every attended key lies in [start, end); start === end when none. */
export interface KeySpan {
  start: number;
  end: number;
  /** Every query of the tile attends exactly [start, end) (no mask needed inside the span). */
  dense: boolean;
}

/** How a query tile sees a key tile: "none" (skip it), "all" (every query attends every key: no mask), "some" (mask). */
export type TileVisibility = "none" | "all" | "some";

function describeValue(x: unknown): string {
  if (x === null) return "null";
  if (Array.isArray(x)) return `an Array of ${x.length}`;
  if (ArrayBuffer.isView(x)) return `a ${x.constructor.name} of ${(x as unknown as ArrayLike<number>).length}`;
  return typeof x;
}

function checkIds(name: "query" | "key", ids: unknown, batch: number, seq: number, who: string, error: AttentionErrorFactory): void {
  const seqName = name === "query" ? "seqQ" : "seqK";
  const expected = `batch * ${seqName} = ${batch} * ${seq} = ${batch * seq}`;
  if (!(ids instanceof Int32Array)) throw error(`${who}: documents.${name} must be an Int32Array of ${expected} ids, got ${describeValue(ids)}`);
  if (ids.length !== batch * seq) throw error(`${who}: documents.${name} must have ${expected} ids, got ${ids.length}`);
  for (let b = 0; b < batch; b++) {
    const row = b * seq;
    for (let t = 1; t < seq; t++) {
      if (ids[row + t]! < ids[row + t - 1]!) {
        throw error(
          `${who}: documents.${name} decreases in row ${b} at index ${t}: ${ids[row + t]} after ${ids[row + t - 1]} (document ids must not decrease along a row)`,
        );
      }
    }
  }
}

/** Checks `documents` against the sizes (O(batch * (seqQ + seqK))); attentionDims calls it. */
export function checkDocuments(documents: unknown, batch: number, seqQ: number, seqK: number, who: string, error: AttentionErrorFactory): void {
  if (typeof documents !== "object" || documents === null)
    throw error(`${who}: documents must be { query, key } (Int32Arrays), got ${describeValue(documents)}`);
  const { query, key } = documents as Partial<AttentionDocuments>;
  checkIds("query", query, batch, seqQ, who, error);
  checkIds("key", key, batch, seqK, who, error);
}

/**
 * The keys every query attends, from documents already checked by
 * `attentionDims` (undefined: one document per row, so only the causal limit
 * cuts). O(batch * (seqQ + seqK)): one merge of the query and key ids per row.
 */
export function documentRanges(documents: AttentionDocuments | undefined, dims: AttentionDims): KeyRanges {
  const { batch, seqQ, seqK, causal, offset } = dims;
  const start = new Int32Array(batch * seqQ);
  const end = new Int32Array(batch * seqQ);
  for (let b = 0; b < batch; b++) {
    // Keys [low, high) of row b carry the current query's id; both only move forward.
    let low = 0;
    let high = 0;
    for (let i = 0; i < seqQ; i++) {
      if (documents === undefined) {
        high = seqK;
      } else {
        const id = documents.query[b * seqQ + i]!;
        const keys = documents.key;
        while (low < seqK && keys[b * seqK + low]! < id) low++;
        if (high < low) high = low;
        while (high < seqK && keys[b * seqK + high]! <= id) high++;
      }
      const limit = causal ? Math.min(high, i + offset + 1) : high;
      start[b * seqQ + i] = low;
      end[b * seqQ + i] = Math.max(low, limit);
    }
  }
  return { batch, seqQ, start, end };
}

/** The keys queries [queryStart, queryEnd) of row b attend, as one span (see KeySpan). O(queryEnd - queryStart). */
export function keySpan(ranges: KeyRanges, b: number, queryStart: number, queryEnd: number): KeySpan {
  let start = Number.POSITIVE_INFINITY;
  let end = Number.NEGATIVE_INFINITY;
  let dense = true;
  const base = b * ranges.seqQ;
  for (let i = base + queryStart; i < base + queryEnd; i++) {
    const s = ranges.start[i]!;
    const e = ranges.end[i]!;
    if (s === e) {
      dense = false;
      continue;
    }
    if (start !== Number.POSITIVE_INFINITY && (s !== start || e !== end)) dense = false;
    start = Math.min(start, s);
    end = Math.max(end, e);
  }
  if (start === Number.POSITIVE_INFINITY) return { start: 0, end: 0, dense: false };
  return { start, end, dense };
}

/** How queries [queryStart, queryEnd) of row b see keys [keyStart, keyEnd) (see TileVisibility). O(queryEnd - queryStart). */
export function tileVisibility(ranges: KeyRanges, b: number, queryStart: number, queryEnd: number, keyStart: number, keyEnd: number): TileVisibility {
  let any = false;
  let all = true;
  const base = b * ranges.seqQ;
  for (let i = base + queryStart; i < base + queryEnd; i++) {
    const s = ranges.start[i]!;
    const e = ranges.end[i]!;
    if (s < keyEnd && e > keyStart && s < e) any = true;
    if (s > keyStart || e < keyEnd) all = false;
  }
  return all ? "all" : any ? "some" : "none";
}
