/**
 * How a sequence of N tokens is split over the P ranks of a sequence-parallel
 * group. Every rank holds `sizes[r]` tokens; laid end to end in rank order
 * they form the layout order, where rank r's tokens start at `starts[r]`
 * (what an all-to-all over the group gathers). `runs[r]` says which global
 * positions those tokens are: runs of consecutive positions, increasing, so a
 * rank's tokens are always in sequence order (causal masking on them is
 * plain causal masking).
 *
 * Layouts (`shardRuns`):
 * - contiguous: rank r holds [starts[r], starts[r] + sizes[r]), sizes from
 *   `evenSplitSizes` (1000 over 3 -> 334, 333, 333);
 * - zigzag over a ring of R groups (causal load balance, as in
 *   ring-flash-attention and Megatron-Core's context parallelism): the
 *   sequence is cut into 2R chunks (`evenSplitSizes(N, 2R)`); group g holds
 *   chunks g and 2R - 1 - g, and its U = P / R ranks (consecutive) split those
 *   tokens evenly in order. R = P: rank r holds chunks r and 2P - 1 - r.
 * Pure arithmetic; no communication.
 */
import { evenSplitSizes } from "@ulysses/tensors";
import { ParallelError } from "./errors.js";

/** Global positions [start, start + length). */
export interface SequenceRun {
  readonly start: number;
  readonly length: number;
}

export type SequenceLayoutKind = "contiguous" | "zigzag";
export const SEQUENCE_LAYOUTS: readonly SequenceLayoutKind[] = ["contiguous", "zigzag"];

export interface SequenceShards {
  /** Global sequence length N. */
  readonly length: number;
  /** Tokens held by each rank. */
  readonly sizes: readonly number[];
  /** Where each rank's tokens start in the layout order (rank after rank). */
  readonly starts: readonly number[];
  /** The global positions each rank holds, as increasing runs. */
  readonly runs: readonly (readonly SequenceRun[])[];
}

/** Where a caller says how the global sequence is split (default: N = localLength * P, equal contiguous shards). */
export interface SequenceOptions {
  /** Global sequence length; contiguous shards follow `evenSplitSizes(seqLength, P)`. */
  seqLength?: number;
  /** Explicit contiguous shard sizes (one per rank); overrides `seqLength`. */
  seqSizes?: readonly number[];
  /** Explicit runs of global positions per rank (any layout, e.g. `shardRuns(N, P, "zigzag")`); overrides both. */
  seqRuns?: readonly (readonly SequenceRun[])[];
}

/** The runs of every rank for N tokens over `size` ranks; zigzag balances `ringDegree` groups of size / ringDegree ranks (default: every rank its own group). */
export function shardRuns(length: number, size: number, layout: SequenceLayoutKind, ringDegree = size): SequenceRun[][] {
  if (!Number.isInteger(length) || length < 0) throw new ParallelError(`sequence length ${length} must be a non-negative integer`);
  if (!Number.isInteger(size) || size < 1) throw new ParallelError(`group size ${size} must be a positive integer`);
  if (layout === "contiguous") {
    let start = 0;
    return evenSplitSizes(length, size).map((n) => {
      const run = [{ start, length: n }];
      start += n;
      return run;
    });
  }
  if (layout !== "zigzag") throw new ParallelError(`sequence layout must be one of ${SEQUENCE_LAYOUTS.join(", ")}, got '${String(layout)}'`);
  if (!Number.isInteger(ringDegree) || ringDegree < 1 || size % ringDegree !== 0)
    throw new ParallelError(`zigzag layout: ring degree ${ringDegree} must divide the group size ${size}`);
  const chunks = evenSplitSizes(length, 2 * ringDegree);
  const chunkStarts: number[] = [];
  let at = 0;
  for (const c of chunks) {
    chunkStarts.push(at);
    at += c;
  }
  const perGroup = size / ringDegree;
  const runs: SequenceRun[][] = [];
  for (let g = 0; g < ringDegree; g++) {
    const own = [g, 2 * ringDegree - 1 - g].map((c) => ({ start: chunkStarts[c]!, length: chunks[c]! }));
    const total = own[0]!.length + own[1]!.length;
    // the group's tokens in order, cut into perGroup even pieces
    let skip = 0;
    for (const n of evenSplitSizes(total, perGroup)) {
      runs.push(takeRuns(own, skip, n));
      skip += n;
    }
  }
  return runs;
}

/** Tokens [skip, skip + n) of the concatenation of `runs`, as runs. */
export function takeRuns(runs: readonly SequenceRun[], skip: number, n: number): SequenceRun[] {
  const out: SequenceRun[] = [];
  let offset = 0;
  for (const run of runs) {
    const from = Math.max(skip, offset);
    const to = Math.min(skip + n, offset + run.length);
    if (to > from) appendRun(out, run.start + (from - offset), to - from);
    offset += run.length;
  }
  return out;
}

/** Appends [start, start + length) to `runs`, joining it to the last run when they touch. */
function appendRun(runs: SequenceRun[], start: number, length: number): void {
  const last = runs[runs.length - 1];
  if (last !== undefined && last.start + last.length === start) runs[runs.length - 1] = { start: last.start, length: last.length + length };
  else runs.push({ start, length });
}

/** The runs of several ranks' tokens joined in rank order (what a group of them holds after an all-to-all). */
export function joinRuns(runs: readonly (readonly SequenceRun[])[]): SequenceRun[] {
  const out: SequenceRun[] = [];
  for (const rank of runs) for (const run of rank) appendRun(out, run.start, run.length);
  return out;
}

/** Whether every rank holds one run and rank r + 1's follows rank r's (the contiguous layout). */
export function isContiguous(shards: SequenceShards): boolean {
  return shards.runs.every((runs, r) => runs.length === 1 && runs[0]!.start === shards.starts[r]);
}

/**
 * The shards of this rank's group, checked against the local shard length.
 * Throws a ParallelError (before any communication) when they disagree.
 */
export function sequenceShards(localLength: number, rank: number, worldSize: number, options: SequenceOptions = {}): SequenceShards {
  let runs: readonly (readonly SequenceRun[])[];
  if (options.seqRuns !== undefined) {
    runs = options.seqRuns;
    checkRuns(runs, worldSize);
  } else if (options.seqSizes !== undefined) {
    const sizes = options.seqSizes;
    if (sizes.length !== worldSize || sizes.some((s) => !Number.isInteger(s) || s < 0)) {
      throw new ParallelError(`seqSizes [${sizes.join(", ")}] must hold ${worldSize} non-negative integers (one per rank)`);
    }
    let start = 0;
    runs = sizes.map((n) => {
      const run = [{ start, length: n }];
      start += n;
      return run;
    });
  } else {
    const length = options.seqLength ?? localLength * worldSize;
    if (!Number.isInteger(length) || length < 0) throw new ParallelError(`seqLength ${length} must be a non-negative integer`);
    runs = shardRuns(length, worldSize, "contiguous");
  }
  const sizes = runs.map((r) => r.reduce((n, run) => n + run.length, 0));
  if (sizes[rank] !== localLength) {
    throw new ParallelError(
      `rank ${rank} holds ${localLength} tokens but the shard sizes [${sizes.join(", ")}] give it ${sizes[rank]} ` +
        `(pass the global seqLength when the sequence is not divisible by ${worldSize})`,
    );
  }
  if (sizes.some((s) => s === 0)) {
    throw new ParallelError(`every rank needs at least one token; shard sizes [${sizes.join(", ")}] over ${worldSize} ranks`);
  }
  const starts: number[] = [];
  let total = 0;
  for (const s of sizes) {
    starts.push(total);
    total += s;
  }
  return { length: total, sizes, starts, runs: runs.map((r) => r.map((run) => ({ start: run.start, length: run.length }))) };
}

/** Runs must be increasing within a rank and cover [0, N) exactly once between the ranks. */
function checkRuns(runs: readonly (readonly SequenceRun[])[], worldSize: number): void {
  const show = () => `[${runs.map((r) => r.map((run) => `${run.start}+${run.length}`).join(" ")).join(" | ")}]`;
  if (!Array.isArray(runs) || runs.length !== worldSize) throw new ParallelError(`seqRuns ${show()} must hold one list of runs per rank (${worldSize})`);
  const all: SequenceRun[] = [];
  for (const rank of runs) {
    let end = -1;
    for (const run of rank) {
      if (!Number.isInteger(run.start) || !Number.isInteger(run.length) || run.start < 0 || run.length < 1 || run.start <= end)
        throw new ParallelError(`seqRuns ${show()}: each rank's runs must be non-empty, increasing and apart`);
      end = run.start + run.length - 1;
      all.push(run);
    }
  }
  all.sort((a, b) => a.start - b.start);
  let next = 0;
  for (const run of all) {
    if (run.start !== next) throw new ParallelError(`seqRuns ${show()} must cover positions 0 .. N - 1 exactly once (position ${next} is off)`);
    next += run.length;
  }
}

/** Gathers the columns at `runs` of every row of [batch, length] values (row-major): [batch, total run length]. */
export function gatherRuns<A extends Int32Array | Float32Array>(values: A, batch: number, length: number, runs: readonly SequenceRun[]): A {
  const total = runs.reduce((n, run) => n + run.length, 0);
  if (runs.length === 1 && runs[0]!.start === 0 && total === length) return values;
  const out = new (values.constructor as new (n: number) => A)(batch * total);
  for (let row = 0; row < batch; row++) {
    let at = row * total;
    for (const run of runs) {
      out.set(values.subarray(row * length + run.start, row * length + run.start + run.length), at);
      at += run.length;
    }
  }
  return out;
}

/** The global positions of `runs`, repeated for every row: int32 [batch * total] (RoPE positions of a non-contiguous shard). */
export function runPositions(runs: readonly SequenceRun[], batch: number): Int32Array {
  const total = runs.reduce((n, run) => n + run.length, 0);
  const out = new Int32Array(batch * total);
  let at = 0;
  for (const run of runs) for (let i = 0; i < run.length; i++) out[at++] = run.start + i;
  for (let row = 1; row < batch; row++) out.copyWithin(row * total, 0, total);
  return out;
}
