/**
 * One optimisation step, on one device or SPMD over a parallelised model's
 * ranks. Gradients (unreduced, in the model's flat gradient) are summed over
 * the model's gradient group with one allReduce, or, under ZeRO-1,
 * reduce-scattered so each rank gets the summed slice it owns; then clipped
 * by the global norm, AdamW-updated, and (ZeRO-1) the updated slices are
 * all-gathered back into every rank's full parameter vector.
 * `lossTileRows` computes the head and the loss a tile of rows at a time
 * (lossAndGradients), so the full [rows, vocab] logits never exist.
 */
import type { ProcessGroup } from "@ulysses/collectives";
import type { AdamWUpdate, TrainingOps } from "@ulysses/kernels";
import type { LMBatch } from "@ulysses/model";
import { EXCHANGE_CHUNK_BYTES } from "@ulysses/parallel";
import { Tensor, evenSplitSizes } from "@ulysses/tensors";
import { AdamW, type AdamWOptions } from "./adamw.js";
import { clipGradNorm } from "./grad-clip.js";
import { lossAndGradients, validateLossTileRows, type LossResult, type TrainModel } from "./loss.js";

export interface TrainStepOptions {
  ops: TrainingOps;
  /** Global gradient-norm clip (0: off). */
  gradClip: number;
  adamw: AdamWOptions;
  /** Shard the optimizer state over the gradient group (ZeRO stage 1). */
  zero1: boolean;
  /** Rows of logits per tile of the loss (a positive integer; 0 or undefined: untiled), as in lossAndGradients. */
  lossTileRows?: number;
}

export interface StepResult extends LossResult {
  gradNorm: number;
}

export class Trainer {
  readonly model: TrainModel;
  readonly optimizer: AdamW;
  readonly options: TrainStepOptions;
  /** The ranks gradients are summed over (null on one device). */
  readonly group: ProcessGroup | null;
  /** Flat-vector elements owned by each rank (ZeRO-1), else one slice of everything. */
  readonly sliceSizes: number[];
  /** The ops' native AdamW loop, when they have one. */
  private readonly adamwKernel: ((update: AdamWUpdate) => void) | undefined;

  constructor(model: TrainModel, options: TrainStepOptions) {
    this.model = model;
    validateLossTileRows(options.lossTileRows);
    this.options = options;
    this.group = model.gradientGroup;
    const total = model.params.size;
    const ranks = this.group?.size ?? 1;
    this.sliceSizes = options.zero1 ? evenSplitSizes(total, ranks) : [total];
    const rank = options.zero1 ? (this.group?.rank ?? 0) : 0;
    const offset = this.sliceSizes.slice(0, rank).reduce((a, b) => a + b, 0);
    const length = this.sliceSizes[rank]!;
    this.optimizer = new AdamW({ offset, length, decayMask: model.params.decayMask(offset, length) }, options.adamw);
    this.adamwKernel = options.ops.adamwUpdate?.bind(options.ops);
  }

  /** Steps taken so far. */
  get step(): number {
    return this.optimizer.step;
  }

  /** One step on `batch`: this DP replica's rows of whole sequences [rows, N]. */
  async trainStep(batch: LMBatch, lr: number): Promise<StepResult> {
    const { params } = this.model;
    const { zero1, gradClip } = this.options;
    const group = this.group;
    params.grads.fill(0);
    const result = await lossAndGradients(this.model, this.options.ops, batch, { lossTileRows: this.options.lossTileRows });
    const { offset, length } = this.optimizer;
    let gradNorm: number;
    if (zero1 && group !== null && group.size > 1) {
      const grads = await reduceScatterInChunks(group, params.grads, this.sliceSizes);
      gradNorm = await clipGradNorm(grads, gradClip, { begin: 0, end: length }, group);
      const slice = params.values.slice(offset, offset + length);
      this.optimizer.update(slice, grads, lr, true, this.adamwKernel);
      await allGatherInChunks(group, slice, params.values, this.sliceSizes);
    } else {
      if (group !== null && group.size > 1) await allReduceInChunks(group, params.grads);
      gradNorm = await clipGradNorm(params.grads, gradClip);
      this.optimizer.update(params.values, params.grads, lr, false, this.adamwKernel);
    }
    return { ...result, gradNorm };
  }

  /** The full optimizer moments (gathered over the group under ZeRO-1; collective then). */
  async fullMoments(): Promise<{ m: Float32Array; v: Float32Array }> {
    const group = this.group;
    if (!this.options.zero1 || group === null || group.size === 1) return { m: this.optimizer.m, v: this.optimizer.v };
    const gather = async (x: Float32Array) => {
      const full = new Float32Array(this.model.params.size);
      await allGatherInChunks(group, x, full, this.sliceSizes);
      return full;
    };
    return { m: await gather(this.optimizer.m), v: await gather(this.optimizer.v) };
  }

  /** Restores the moments (full vectors; each rank keeps its slice) and the step count. */
  restoreMoments(m: Float32Array, v: Float32Array, step: number): void {
    const { offset, length } = this.optimizer;
    this.optimizer.m.set(m.subarray(offset, offset + length));
    this.optimizer.v.set(v.subarray(offset, offset + length));
    this.optimizer.step = step;
  }
}

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

/** ZeRO-1's all-gather: every rank's `slice` into its place in `into` (the flat vector), in windows of at most chunkBytes. */
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
