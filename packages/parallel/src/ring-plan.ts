/**
 * Ring attention's schedule: which blocks of keys and values each rank holds
 * and sends at each step (a causal contiguous layout skips the blocks of
 * later positions), the exact bytes that makes, and each rank's plan of local
 * kernel calls per block (query runs against key prefixes, packed documents
 * that never meet skipped), kept for backward.
 */
import type { AttentionOptions } from "@ulysses/kernels";
import { documentRuns, checkSequenceDocuments } from "./sharded-attention.js";
import { isContiguous, takeRuns, type SequenceShards } from "./sequence-shards.js";

/** Whether `rank` holds a block at ring step `step` (the block of rank (rank − step) mod size); skipsFuture (contiguous causal): blocks j <= rank only. */
export function ringHolds(rank: number, size: number, step: number, skipsFuture: boolean): boolean {
  return step >= 0 && step < size && (!skipsFuture || step <= rank);
}

/** The blocks `rank` sends forward (k, v) and, in backward, the accumulators it sends (dk, dv). */
export function ringSends(rank: number, size: number, skipsFuture: boolean): { kv: number[]; accumulators: number[] } {
  const kv: number[] = [];
  const accumulators: number[] = [];
  for (let t = 0; ringHolds(rank, size, t, skipsFuture); t++) {
    const block = (rank - t + size) % size;
    if (ringHolds((rank + 1) % size, size, t + 1, skipsFuture)) kv.push(block);
  }
  for (let t = 1; t < size; t++) {
    const block = (rank - t + size) % size;
    if (carries(block, size, skipsFuture)) accumulators.push(block);
  }
  return { kv, accumulators };
}

/** Bytes `rank` sends in one forward; tokenBytes = 2·b·Hkv·D·4 (one token's k and v over the batch). */
export function ringForwardBytes(sizes: readonly number[], rank: number, skipsFuture: boolean, tokenBytes: number): number {
  return ringSends(rank, sizes.length, skipsFuture).kv.reduce((n, j) => n + sizes[j]! * tokenBytes, 0);
}

/** Bytes `rank` sends in one backward (k, v around the ring again, then dk, dv accumulators). */
export function ringBackwardBytes(sizes: readonly number[], rank: number, skipsFuture: boolean, tokenBytes: number): number {
  const { accumulators } = ringSends(rank, sizes.length, skipsFuture);
  return ringForwardBytes(sizes, rank, skipsFuture, tokenBytes) + accumulators.reduce((n, j) => n + sizes[j]! * tokenBytes, 0);
}

/** One local kernel call on a block: queries [qStart, qStart + qLength) of this rank against the block's first kLength keys. */
export interface BlockCall {
  qStart: number;
  qLength: number;
  kLength: number;
  options: AttentionOptions;
}

/** Which blocks this rank computes on, with which calls (kept for backward). */
export class RingPlan {
  private readonly calls = new Map<number, BlockCall[]>();
  /** Contiguous causal: blocks in a rank's future never travel to it. */
  readonly skipsFuture: boolean;

  constructor(
    readonly shards: SequenceShards,
    readonly rank: number,
    readonly batch: number,
    readonly causal: boolean,
    readonly scale: number | undefined,
    private readonly documents: Int32Array | undefined,
    private readonly who: string,
  ) {
    this.skipsFuture = causal && isContiguous(shards);
    // checks the ids before any communication
    checkSequenceDocuments(documents, batch, shards.length, who);
  }

  /** The calls for block j (none when no query of this rank sees any of its keys). */
  blockCalls(block: number): BlockCall[] {
    let calls = this.calls.get(block);
    if (calls === undefined) {
      calls = this.plan(block);
      this.calls.set(block, calls);
    }
    return calls;
  }

  private plan(block: number): BlockCall[] {
    const { shards, rank } = this;
    const size = shards.sizes[rank]!;
    const keys = shards.sizes[block]!;
    const spans: { qStart: number; qLength: number; kLength: number; causal: boolean }[] = [];
    if (block === rank || !this.causal) {
      spans.push({ qStart: 0, qLength: size, kLength: keys, causal: this.causal });
    } else {
      // each query run sees the key runs before it (a prefix of the block); neighbouring runs with the same prefix share a call
      let qStart = 0;
      for (const run of shards.runs[rank]!) {
        let kLength = 0;
        for (const key of shards.runs[block]!) if (key.start < run.start) kLength += key.length;
        const last = spans[spans.length - 1];
        if (last !== undefined && last.kLength === kLength && last.qStart + last.qLength === qStart) last.qLength += run.length;
        else spans.push({ qStart, qLength: run.length, kLength, causal: false });
        qStart += run.length;
      }
    }
    const calls: BlockCall[] = [];
    for (const span of spans) {
      if (span.kLength === 0) continue;
      const options: AttentionOptions = { causal: span.causal };
      if (this.scale !== undefined) options.scale = this.scale;
      if (this.documents !== undefined) {
        const query = documentRuns(this.documents, this.batch, shards.length, takeRuns(shards.runs[rank]!, span.qStart, span.qLength), this.who)!;
        const key = documentRuns(this.documents, this.batch, shards.length, takeRuns(shards.runs[block]!, 0, span.kLength), this.who)!;
        if (!documentsOverlap(query, key, this.batch)) continue;
        options.documents = { query, key };
      }
      calls.push({ qStart: span.qStart, qLength: span.qLength, kLength: span.kLength, options });
    }
    return calls;
  }
}

/** Whether any row's query ids [b * sq] and key ids [b * sk] (non-decreasing per row) share a document range. */
function documentsOverlap(query: Int32Array, key: Int32Array, batch: number): boolean {
  const sq = query.length / batch;
  const sk = key.length / batch;
  for (let row = 0; row < batch; row++) {
    if (query[row * sq]! <= key[row * sk + sk - 1]! && key[row * sk]! <= query[row * sq + sq - 1]!) return true;
  }
  return false;
}

/** Whether block j's dk, dv accumulator travels (contiguous causal: block P − 1 has no user but its owner). */
export function carries(block: number, size: number, skipsFuture: boolean): boolean {
  return !skipsFuture || block !== size - 1;
}
