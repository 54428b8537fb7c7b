/**
 * ZeRO's collectives over a flat vector sharded into per-rank slices
 * (evenSplitSizes: rank j owns sliceSizes[j] elements after those of the
 * ranks before it), each in messages of at most EXCHANGE_CHUNK_BYTES so that
 * no backend stages a whole vector: the all-reduce of ZeRO-0, the
 * reduce-scatter and all-gather of ZeRO-1, ZeRO 2 and 3's reduce-scatter of
 * one run of gradients into the slices, and ZeRO-3's gather of one run of
 * weights from them.
 */
import type { ProcessGroup } from "@ulysses/collectives";
import { EXCHANGE_CHUNK_BYTES } from "@ulysses/parallel";
import { Tensor, toDTypeInto } from "@ulysses/tensors";
import { TrainingError } from "./errors.js";
import type { SliceGradients } from "./slice-gradients.js";

/**
 * Sums `values` over `group` in place, in allReduces of at most
 * EXCHANGE_CHUNK_BYTES: a backend may stage a whole message (the threads
 * backend keeps its outboxes as large as the largest message it has carried,
 * in two sets), so one call for the whole gradient would keep up to twice the
 * gradient's size per rank resident for the rest of the run (284 MiB at
 * SP 2 for a 17.7M-parameter model). Elementwise sums: the same result as one
 * call.
 */
export async function allReduceInChunks(group: ProcessGroup, values: Float32Array, chunkBytes = EXCHANGE_CHUNK_BYTES): Promise<void> {
  const step = Math.max(1, Math.floor(chunkBytes / Float32Array.BYTES_PER_ELEMENT));
  for (let begin = 0; begin < values.length; begin += step) {
    const part = values.subarray(begin, Math.min(values.length, begin + step));
    await group.allReduce(new Tensor("float32", [part.length], part), { op: "sum" });
  }
}

/** One window of ZeRO-1's chunked collectives: each rank's piece, where it lies in the flat vector and in the packed window. */
interface Window {
  /** The window starts this many elements into every rank's slice. */
  at: number;
  /** Elements of each rank's slice in the window. */
  pieces: number[];
  total: number;
  /** Rank j's piece: at `flat` in the flat vector, at `packed` in the window (ranks in order). */
  parts: { flat: number; packed: number; length: number }[];
}

/**
 * The windows of ZeRO-1's chunked collectives over slices of `sliceSizes`
 * elements (rank j's after those of ranks before it): window k carries
 * elements [k q, k q + pieces[j]) of every rank j's slice, q = floor(chunk
 * elements / ranks), so a window moves at most the chunk. Every rank computes
 * the same windows from the same sizes.
 */
function windowsOf(sliceSizes: readonly number[], chunkBytes: number): Window[] {
  const q = Math.max(1, Math.floor(chunkBytes / Float32Array.BYTES_PER_ELEMENT / sliceSizes.length));
  const offsets = sliceSizes.map((_, j) => sliceSizes.slice(0, j).reduce((a, b) => a + b, 0));
  const longest = Math.max(0, ...sliceSizes);
  const windows: Window[] = [];
  for (let at = 0; at < longest; at += q) {
    const pieces = sliceSizes.map((n) => Math.max(0, Math.min(q, n - at)));
    let packed = 0;
    const parts = pieces.map((length, j) => {
      const part = { flat: offsets[j]! + at, packed, length };
      packed += length;
      return part;
    });
    windows.push({ at, pieces, total: packed, parts });
  }
  return windows;
}

/** One buffer for every window's packed elements (the first window is the largest): a collective per window, not an allocation. */
function packedBuffer(windows: readonly Window[]): Float32Array {
  return new Float32Array(windows[0]?.total ?? 0);
}

/**
 * ZeRO-1's reduce-scatter of the flat vector `values` (rank j owns
 * sliceSizes[j] elements), in windows of at most chunkBytes (windowsOf):
 * returns this rank's summed slice. Like allReduceInChunks, no call stages
 * the whole vector.
 */
export async function reduceScatterInChunks(
  group: ProcessGroup,
  values: Float32Array,
  sliceSizes: readonly number[],
  chunkBytes = EXCHANGE_CHUNK_BYTES,
): Promise<Float32Array> {
  const mine = new Float32Array(sliceSizes[group.rank]!);
  const windows = windowsOf(sliceSizes, chunkBytes);
  const buffer = packedBuffer(windows);
  for (const { at, pieces, total, parts } of windows) {
    for (const p of parts) if (p.length > 0) buffer.set(values.subarray(p.flat, p.flat + p.length), p.packed);
    const n = pieces[group.rank]!;
    const output = new Tensor("float32", [n], mine.subarray(at, at + n));
    await group.reduceScatter(new Tensor("float32", [total], buffer.subarray(0, total)), { op: "sum", sizes: pieces, output });
  }
  return mine;
}

/**
 * ZeRO-2's reduce-scatter of one run of the flat vector: `values` are this
 * rank's gradients of flat elements [at, at + values.length), which cross
 * the slices of one or more ranks (rank j's: sliceSizes[j] elements after
 * those of ranks before it). In chunks of at most `scratch.length` elements,
 * each rank's part of a chunk is summed over `group` and added into `mine`
 * (this rank's slice gradient) where it belongs. The values of a chunk are
 * already in rank order, so they are sent as they lie.
 */
export async function reduceScatterRangeInto(
  group: ProcessGroup,
  values: Float32Array,
  at: number,
  sliceSizes: readonly number[],
  mine: SliceGradients,
  scratch: Float32Array,
): Promise<void> {
  for (const { begin, end, pieces, mineAt } of rangeChunks(sliceSizes, group.rank, at, values.length, scratch.length)) {
    const n = pieces[group.rank]!;
    const output = new Tensor("float32", [n], scratch.subarray(0, n));
    await group.reduceScatter(new Tensor("float32", [end - begin], values.subarray(begin, end)), { op: "sum", sizes: pieces, output });
    if (n > 0) mine.addInto(mineAt, scratch.subarray(0, n));
  }
}

/**
 * The chunks of a run of flat elements [at, at + length) over slices of
 * `sliceSizes`, at most `chunk` elements each: its place in the run [begin,
 * end), each rank's piece of it, and where rank `rank`'s piece starts in its
 * slice (0 when it has none).
 */
function* rangeChunks(sliceSizes: readonly number[], rank: number, at: number, length: number, chunk: number) {
  const starts = sliceSizes.map((_, j) => sliceSizes.slice(0, j).reduce((a, b) => a + b, 0));
  const myStart = starts[rank]!;
  for (let begin = 0; begin < length; begin += chunk) {
    const end = Math.min(length, begin + chunk);
    const from = at + begin;
    const to = at + end;
    const pieces = sliceSizes.map((n, j) => Math.max(0, Math.min(to, starts[j]! + n) - Math.max(from, starts[j]!)));
    yield { begin, end, pieces, mineAt: pieces[rank] === 0 ? 0 : Math.max(from, myStart) - myStart };
  }
}

/**
 * ZeRO-3's weights travelling in bf16: this rank's slice rounded to bf16
 * (`bits`, the caller keeps it current) and a scratch for what arrives, of
 * at least a message's elements (bfloat16TravelScratch).
 */
export interface Bfloat16Travel {
  bits: Uint16Array;
  scratch: Uint16Array;
}

/** A scratch for Bfloat16Travel: one message of at most chunkBytes. */
export function bfloat16TravelScratch(chunkBytes = EXCHANGE_CHUNK_BYTES): Uint16Array {
  return new Uint16Array(Math.max(1, Math.floor(chunkBytes / Uint16Array.BYTES_PER_ELEMENT)));
}

/**
 * ZeRO-3's gather of one run of the flat vector: flat elements [at, at +
 * into.length), which cross the slices of one or more ranks (rank j's:
 * sliceSizes[j] elements after those of ranks before it; `mine` is this
 * rank's), into `into`, in all-gathers of at most chunkBytes. A chunk's
 * pieces lie in rank order, so each all-gather writes straight into `into`;
 * with `travel`, the pieces go as bf16 (half the bytes) into its scratch and
 * are widened into `into` exactly. Collective: every rank calls it with the
 * same range.
 */
export async function allGatherRangeInto(
  group: ProcessGroup,
  mine: Float32Array,
  sliceSizes: readonly number[],
  at: number,
  into: Float32Array,
  chunkBytes = EXCHANGE_CHUNK_BYTES,
  travel?: Bfloat16Travel,
): Promise<void> {
  const bytesPer = travel === undefined ? Float32Array.BYTES_PER_ELEMENT : Uint16Array.BYTES_PER_ELEMENT;
  const chunk = Math.max(1, Math.floor(chunkBytes / bytesPer));
  if (travel !== undefined && travel.scratch.length < Math.min(chunk, into.length))
    throw new TrainingError(`allGatherRangeInto: a bf16 scratch of ${travel.scratch.length} elements is less than a message's ${chunk}`);
  for (const { begin, end, pieces, mineAt } of rangeChunks(sliceSizes, group.rank, at, into.length, chunk)) {
    const n = pieces[group.rank]!;
    const target = into.subarray(begin, end);
    if (travel === undefined) {
      await group.allGather(new Tensor("float32", [n], mine.subarray(mineAt, mineAt + n)), {
        sizes: pieces,
        output: new Tensor("float32", [end - begin], target),
      });
      continue;
    }
    const arrived = new Tensor("bfloat16", [end - begin], travel.scratch.subarray(0, end - begin));
    await group.allGather(new Tensor("bfloat16", [n], travel.bits.subarray(mineAt, mineAt + n)), { sizes: pieces, output: arrived });
    toDTypeInto(arrived, new Tensor("float32", [end - begin], target));
  }
}

/** ZeRO's all-gather: every rank's `slice` into its place in `into` (the flat vector), in windows of at most chunkBytes. */
export async function allGatherInChunks(
  group: ProcessGroup,
  slice: Float32Array,
  into: Float32Array,
  sliceSizes: readonly number[],
  chunkBytes = EXCHANGE_CHUNK_BYTES,
): Promise<void> {
  const windows = windowsOf(sliceSizes, chunkBytes);
  const buffer = packedBuffer(windows);
  for (const { at, pieces, total, parts } of windows) {
    const n = pieces[group.rank]!;
    const output = new Tensor("float32", [total], buffer.subarray(0, total));
    await group.allGather(new Tensor("float32", [n], slice.subarray(at, at + n)), { sizes: pieces, output });
    for (const p of parts) if (p.length > 0) into.set(buffer.subarray(p.packed, p.packed + p.length), p.flat);
  }
}
