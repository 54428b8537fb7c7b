/**
 * One optimisation step, on one device or SPMD over a parallelised model's
 * ranks, at a ZeRO stage over the model's gradient group:
 *
 * - 0: gradients (unreduced, in the model's flat gradient) are all-reduced;
 *   every rank clips and updates all of the weights with all of AdamW's state.
 * - 1: the flat gradient is reduce-scattered, so each rank gets the summed
 *   slice it owns and holds AdamW's moments of that slice only; it updates
 *   that slice, and the slices are all-gathered back into every rank's weights.
 * - 2: as 1, and each block's gradient is reduce-scattered as soon as the
 *   backward makes it (ParameterStore.streamBlockGradients): a rank holds the
 *   summed gradient of its slice. The parameters outside the blocks (the
 *   embedding, the final norm, an untied head) get theirs in two phases, the
 *   head's and the final norm's before the blocks run backward and the
 *   embedding lookup's after: their held buffer is reduce-scattered into the
 *   slice and dropped at the first block's gradient (so it is not resident
 *   through the blocks' backward) and again after the backward; the second
 *   buffer is new, and only the rows of this rank's tokens are ever written.
 *
 * With shared weights (one copy of the values that every rank of the group
 * reads, on the threads and local backends) each rank updates its slice in
 * place and a barrier replaces the all-gather.
 * `lossTileRows` computes the head and the loss a tile of rows at a time
 * (lossAndGradients), so the full [rows, vocab] logits never exist.
 */
import type { ProcessGroup } from "@ulysses/collectives";
import { collectGarbageNow, type AdamWUpdate, type TrainingOps } from "@ulysses/kernels";
import type { LMBatch } from "@ulysses/model";
import { EXCHANGE_CHUNK_BYTES } from "@ulysses/parallel";
import { Tensor, evenSplitSizes } from "@ulysses/tensors";
import { AdamW, type AdamWOptions } from "./adamw.js";
import { clipGradNorm, clipScaleOf, normOfSums } from "./grad-clip.js";
import { sliceGradients, type GradientDtype, type SliceGradients } from "./slice-gradients.js";
import { TrainingError } from "./errors.js";
import { lossAndGradients, validateLossTileRows, type LossResult, type TrainModel } from "./loss.js";

export interface TrainStepOptions {
  ops: TrainingOps;
  /** Global gradient-norm clip (0: off). */
  gradClip: number;
  adamw: AdamWOptions;
  /** The ZeRO stage over the gradient group: 0 (none), 1 (AdamW state sharded), 2 (gradients too). */
  zero: ZeroStage;
  /**
   * The model's weights are one copy that every rank of the gradient group
   * reads (ParameterStoreOptions.values): each rank updates its slice in place.
   * Needs zero 1 or 2.
   */
  sharedWeights?: boolean;
  /** Rows of logits per tile of the loss (a positive integer; 0 or undefined: untiled), as in lossAndGradients. */
  lossTileRows?: number;
  /**
   * How ZeRO-2's slice gradients are stored (default float32): bfloat16
   * halves them (rounded to nearest even as each summed part is added; the
   * master weights and AdamW's moments stay float32). Needs zero 2.
   */
  sliceGradientDtype?: GradientDtype;
}

/** ZeRO stages: 0 none, 1 optimizer state sharded, 2 gradients sharded too. */
export const ZERO_STAGES = [0, 1, 2] as const;
export type ZeroStage = (typeof ZERO_STAGES)[number];

/** Held gradient buffers at least this large are collected as soon as they are dropped (ZeRO-2), not when V8 next decides. */
export const COLLECT_DROPPED_GRADIENTS_BYTES = 64 * 1024 * 1024;

export interface StepResult extends LossResult {
  gradNorm: number;
}

export class Trainer {
  readonly model: TrainModel;
  readonly optimizer: AdamW;
  readonly options: TrainStepOptions;
  /** The ranks gradients are summed over (null on one device). */
  readonly group: ProcessGroup | null;
  /** Flat-vector elements owned by each rank (ZeRO 1 and 2), else one slice of everything. */
  readonly sliceSizes: number[];
  /** ZeRO-2 over more than one rank: the summed gradient of this rank's slice, filled during the backward (else null). */
  readonly sliceGradients: SliceGradients | null;
  /** The ops' native AdamW loop, when they have one. */
  private readonly adamwKernel: ((update: AdamWUpdate) => void) | undefined;

  constructor(model: TrainModel, options: TrainStepOptions) {
    this.model = model;
    validateLossTileRows(options.lossTileRows);
    if (!(ZERO_STAGES as readonly number[]).includes(options.zero))
      throw new TrainingError(`zero must be one of ${ZERO_STAGES.join(", ")} (the ZeRO stage), got ${String(options.zero)}`);
    if (options.sharedWeights === true && options.zero === 0)
      throw new TrainingError("shared weights are updated a slice per rank, in place: they need ZeRO stage 1 or 2, got zero 0");
    const gradientDtype = options.sliceGradientDtype ?? "float32";
    if (gradientDtype !== "float32" && options.zero !== 2)
      throw new TrainingError(`${gradientDtype} gradients are ZeRO-2's slices stored in ${gradientDtype}: they need ZeRO stage 2, got zero ${options.zero}`);
    this.options = options;
    this.group = model.gradientGroup;
    const total = model.params.size;
    const ranks = this.group?.size ?? 1;
    const sharded = options.zero > 0;
    this.sliceSizes = sharded ? evenSplitSizes(total, ranks) : [total];
    const rank = sharded ? (this.group?.rank ?? 0) : 0;
    const offset = this.sliceSizes.slice(0, rank).reduce((a, b) => a + b, 0);
    const length = this.sliceSizes[rank]!;
    this.optimizer = new AdamW({ offset, length, decayMask: model.params.decayMask(offset, length) }, options.adamw);
    this.adamwKernel = options.ops.adamwUpdate?.bind(options.ops);
    const group = this.group;
    this.sliceGradients = null;
    if (options.zero === 2 && group !== null && group.size > 1) {
      const mine = sliceGradients(length, gradientDtype);
      this.sliceGradients = mine;
      model.params.streamBlockGradients(async (at, values) => {
        // the first block's gradient: the head's and the final norm's are complete, and go to the slices before the blocks run
        if (this.edgePending) await this.flushHeldGradients(group, mine);
        await reduceScatterRangeInto(group, values, at, this.sliceSizes, mine, this.exchangeScratch());
      });
    }
  }

  /** ZeRO-2: whether this step's held gradients (outside the blocks) have not yet gone to the slices before the blocks' backward. */
  private edgePending = false;

  /**
   * ZeRO-2: the held gradients (the parameters outside the blocks) summed
   * into the slices, and the held buffer dropped (collected at once when
   * large). Collective: every rank calls it at the same points of the step.
   */
  private async flushHeldGradients(group: ProcessGroup, mine: SliceGradients): Promise<void> {
    this.edgePending = false;
    const { params } = this.model;
    // a rank that wrote none of them still takes part (its new buffer is zero, and its untouched pages are never made resident)
    for (const r of params.heldRanges())
      await reduceScatterRangeInto(group, params.grads.subarray(r.held, r.held + r.length), r.flat, this.sliceSizes, mine, this.exchangeScratch());
    if (params.dropHeldGradients() * Float32Array.BYTES_PER_ELEMENT >= COLLECT_DROPPED_GRADIENTS_BYTES) collectGarbageNow();
  }

  private scratch: Float32Array | null = null;

  /** ZeRO-2's reduce-scatter scratch: EXCHANGE_CHUNK_BYTES, made once. */
  private exchangeScratch(): Float32Array {
    this.scratch ??= new Float32Array(Math.max(1, Math.floor(EXCHANGE_CHUNK_BYTES / Float32Array.BYTES_PER_ELEMENT)));
    return this.scratch;
  }

  /** Steps taken so far. */
  get step(): number {
    return this.optimizer.step;
  }

  /** One step on `batch`: this DP replica's rows of whole sequences [rows, N]. */
  async trainStep(batch: LMBatch, lr: number): Promise<StepResult> {
    const { params } = this.model;
    const { gradClip } = this.options;
    const group = this.group;
    if (this.sliceGradients !== null) {
      // ZeRO-2: the blocks' gradients reach sliceGradients during the backward, the others in two flushes
      this.sliceGradients.zero();
      params.dropHeldGradients();
      this.edgePending = true;
    } else {
      params.grads.fill(0);
    }
    const result = await lossAndGradients(this.model, this.options.ops, batch, { lossTileRows: this.options.lossTileRows });
    const { offset, length } = this.optimizer;
    let gradNorm: number;
    const slice = params.values.subarray(offset, offset + length);
    if (this.sliceGradients !== null && group !== null) {
      // the embedding lookup's (and, with no block, all of them)
      const mine = this.sliceGradients;
      await this.flushHeldGradients(group, mine);
      gradNorm = await normOfSums(mine.sumOfSquares(), group);
      const scale = clipScaleOf(gradNorm, gradClip);
      // in place: the slice is this rank's to change (every rank reads the rest); the gradient read a part at a time, clipped
      this.optimizer.updateInParts(slice, lr, (from, out) => mine.read(from, out, scale), this.exchangeScratch(), this.adamwKernel);
      await this.afterSliceUpdate(group, slice);
    } else if (this.options.zero > 0 && group !== null && group.size > 1) {
      const sliceGrads = await reduceScatterInChunks(group, params.grads, this.sliceSizes);
      gradNorm = await clipGradNorm(sliceGrads, gradClip, { begin: 0, end: length }, group);
      this.optimizer.update(slice, sliceGrads, lr, true, this.adamwKernel);
      await this.afterSliceUpdate(group, slice);
    } else {
      if (group !== null && group.size > 1) await allReduceInChunks(group, params.grads);
      gradNorm = await clipGradNorm(params.grads, gradClip);
      this.optimizer.update(params.values, params.grads, lr, false, this.adamwKernel);
    }
    return { ...result, gradNorm };
  }

  /** Every rank's updated slice into every rank's weights: one shared copy needs only every rank past its update. */
  private async afterSliceUpdate(group: ProcessGroup, slice: Float32Array): Promise<void> {
    if (this.options.sharedWeights === true) await group.barrier();
    else await allGatherInChunks(group, slice, this.model.params.values, this.sliceSizes);
  }

  /**
   * One of AdamW's moments over the whole flat vector, as a run of byte parts
   * in flat order (a checkpoint writes them as they come). Sharded (ZeRO 1
   * and 2 over more than one rank), each rank's slice is broadcast from it in
   * parts of at most EXCHANGE_CHUNK_BYTES: collective, every rank of the group
   * draws the parts in the same order, and each part is one buffer refilled
   * (use it before drawing the next). Otherwise this rank's own moment.
   */
  async *momentParts(which: "m" | "v"): AsyncGenerator<Uint8Array> {
    const mine = this.optimizer[which];
    const group = this.group;
    const bytes = (x: Float32Array) => new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
    if (this.options.zero === 0 || group === null || group.size === 1) {
      yield bytes(mine);
      return;
    }
    const buffer = new Float32Array(Math.max(1, Math.floor(EXCHANGE_CHUNK_BYTES / Float32Array.BYTES_PER_ELEMENT)));
    for (let root = 0; root < group.size; root++) {
      const n = this.sliceSizes[root]!;
      for (let at = 0; at < n; at += buffer.length) {
        const part = buffer.subarray(0, Math.min(buffer.length, n - at));
        if (group.rank === root) part.set(mine.subarray(at, at + part.length));
        const got = await group.broadcast(new Tensor("float32", [part.length], part), { root });
        yield bytes(got.data as Float32Array);
      }
    }
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
  const starts = sliceSizes.map((_, j) => sliceSizes.slice(0, j).reduce((a, b) => a + b, 0));
  const myStart = starts[group.rank]!;
  const chunk = scratch.length;
  for (let begin = 0; begin < values.length; begin += chunk) {
    const end = Math.min(values.length, begin + chunk);
    const from = at + begin;
    const to = at + end;
    const pieces = sliceSizes.map((n, j) => Math.max(0, Math.min(to, starts[j]! + n) - Math.max(from, starts[j]!)));
    const n = pieces[group.rank]!;
    const output = new Tensor("float32", [n], scratch.subarray(0, n));
    await group.reduceScatter(new Tensor("float32", [end - begin], values.subarray(begin, end)), { op: "sum", sizes: pieces, output });
    if (n === 0) continue;
    mine.addInto(Math.max(from, myStart) - myStart, scratch.subarray(0, n));
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
