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
 * - 3: as 2, and the weights are sharded too: the model's parameter store
 *   holds this rank's slice only (GptOptions.shardOver, the same slices), the
 *   Trainer installs the collective that gathers a range of them
 *   (allGatherRangeInto), the model gathers each layer's weights just before
 *   it runs (the next layer's while one runs), and after the update nothing
 *   is gathered back. The gathers run on a group of their own (the gradient
 *   group's ranks, made at the first gather), so that one running beside a
 *   layer never pairs with that layer's collectives or the gradients'.
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
import { Tensor, evenSplitSizes, toDTypeInto } from "@ulysses/tensors";
import { AdamW, type AdamWOptions } from "./adamw.js";
import { clipGradNorm, clipScaleOf, normOfSums } from "./grad-clip.js";
import { sliceGradients, type GradientDtype, type SliceGradients } from "./slice-gradients.js";
import { TrainingError } from "./errors.js";
import {
  allGatherInChunks,
  allGatherRangeInto,
  allReduceInChunks,
  bfloat16TravelScratch,
  reduceScatterInChunks,
  reduceScatterRangeInto,
} from "./zero-collectives.js";
import { lossAndGradients, validateLossTileRows, type LossResult, type TrainModel } from "./loss.js";

export interface TrainStepOptions {
  ops: TrainingOps;
  /** Global gradient-norm clip (0: off). */
  gradClip: number;
  adamw: AdamWOptions;
  /** The ZeRO stage over the gradient group: 0 (none), 1 (AdamW state sharded), 2 (gradients too), 3 (weights too). */
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
   * master weights and AdamW's moments stay float32). Needs zero 2 or 3.
   */
  sliceGradientDtype?: GradientDtype;
  /**
   * ZeRO-3: the dtype the weights travel in when gathered (default
   * float32). bfloat16 halves the gathers' bytes: each rank's slice is
   * rounded to nearest even once after each update (a copy beside it; the
   * float32 slice stays the master that AdamW updates and checkpoints
   * hold), and what arrives is widened exactly, so every rank computes with
   * the same bf16-valued weights. Needs zero 3.
   */
  weightGatherDtype?: GradientDtype;
}

/** ZeRO stages: 0 none, 1 optimizer state sharded, 2 gradients sharded too, 3 weights sharded too. */
export const ZERO_STAGES = [0, 1, 2, 3] as const;
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
  /** ZeRO 2 and 3 over more than one rank: the summed gradient of this rank's slice, filled during the backward (else null). */
  readonly sliceGradients: SliceGradients | null;
  /** The ops' native AdamW loop, when they have one. */
  private readonly adamwKernel: ((update: AdamWUpdate) => void) | undefined;

  constructor(model: TrainModel, options: TrainStepOptions) {
    this.model = model;
    validateLossTileRows(options.lossTileRows);
    if (!(ZERO_STAGES as readonly number[]).includes(options.zero))
      throw new TrainingError(`zero must be one of ${ZERO_STAGES.join(", ")} (the ZeRO stage), got ${String(options.zero)}`);
    if (options.sharedWeights === true && (options.zero === 0 || options.zero === 3))
      throw new TrainingError(`shared weights are one whole copy updated a slice per rank, in place: they need ZeRO stage 1 or 2, got zero ${options.zero}`);
    const gradientDtype = options.sliceGradientDtype ?? "float32";
    if (gradientDtype !== "float32" && options.zero < 2)
      throw new TrainingError(
        `${gradientDtype} gradients are ZeRO-2's slices stored in ${gradientDtype}: they need ZeRO stage 2 or 3, got zero ${options.zero}`,
      );
    const gatherDtype = options.weightGatherDtype ?? "float32";
    if (gatherDtype !== "float32" && options.zero !== 3)
      throw new TrainingError(`weights gathered in ${gatherDtype} are ZeRO-3's gathers: they need ZeRO stage 3, got zero ${options.zero}`);
    this.options = options;
    this.group = model.gradientGroup;
    const total = model.params.size;
    const ranks = this.group?.size ?? 1;
    const sharded = options.zero > 0;
    this.sliceSizes = sharded ? evenSplitSizes(total, ranks) : [total];
    const rank = sharded ? (this.group?.rank ?? 0) : 0;
    const offset = this.sliceSizes.slice(0, rank).reduce((a, b) => a + b, 0);
    const length = this.sliceSizes[rank]!;
    checkShard(model.params, options.zero, offset, length, ranks);
    this.optimizer = new AdamW({ offset, length, decayMask: model.params.decayMask(offset, length) }, options.adamw);
    this.adamwKernel = options.ops.adamwUpdate?.bind(options.ops);
    const group = this.group;
    this.sliceGradients = null;
    if (options.zero === 3 && group !== null && group.size > 1) {
      const { params } = model;
      const travel = gatherDtype === "bfloat16" ? { bits: new Uint16Array(length), scratch: bfloat16TravelScratch() } : undefined;
      params.gatherWith(async (at, into) => {
        const gatherGroup = (await this.weightGatherGroup())!;
        if (travel !== undefined && !this.travelFresh) {
          // the gathers run one at a time (ParameterStore.gather): none reads the copy while it is rounded
          toDTypeInto(new Tensor("float32", [length], params.owned), new Tensor("bfloat16", [length], travel.bits));
          this.travelFresh = true;
        }
        await allGatherRangeInto(gatherGroup, params.owned, this.sliceSizes, at, into, EXCHANGE_CHUNK_BYTES, travel);
      });
    }
    if (options.zero >= 2 && group !== null && group.size > 1) {
      const mine = sliceGradients(length, gradientDtype);
      this.sliceGradients = mine;
      model.params.streamBlockGradients(async (at, values) => {
        // the first block's gradient: the head's and the final norm's are complete, and go to the slices before the blocks run
        if (this.edgePending) await this.flushHeldGradients(group, mine);
        await reduceScatterRangeInto(group, values, at, this.sliceSizes, mine, this.exchangeScratch());
      });
    }
  }

  private gatherGroup: Promise<ProcessGroup> | null = null;
  /** ZeRO-3 with bf16 gathers: whether the slice's bf16 copy is the slice's values rounded (it is rounded at the first gather after they change). */
  private travelFresh = false;

  /** The weights this rank holds were changed from outside (a checkpoint read into them): a bf16 copy for the gathers is made anew. */
  weightsChanged(): void {
    this.travelFresh = false;
  }

  /**
   * ZeRO-3 over more than one rank: the group the weights are gathered on
   * (the gradient group's ranks, a group of their own), made at the first
   * call, a collective over the gradient group that every rank makes at the
   * same point (the first gather, or earlier by the caller's choice); null
   * when nothing is gathered.
   */
  weightGatherGroup(): Promise<ProcessGroup> | null {
    const group = this.group;
    if (this.options.zero !== 3 || group === null || group.size === 1) return null;
    this.gatherGroup ??= group.newGroup(Array.from({ length: group.size }, (_, r) => r)).then((g) => g!);
    return this.gatherGroup;
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
    // this rank's slice of the weights: within the whole vector, or (ZeRO-3) all the store holds
    const slice = params.owned.subarray(offset - params.shard.offset, offset - params.shard.offset + length);
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
      this.optimizer.update(params.owned, params.grads, lr, false, this.adamwKernel);
    }
    return { ...result, gradNorm };
  }

  /** Every rank's updated slice into every rank's weights: one shared copy needs only every rank past its update, sharded ones (ZeRO-3) nothing. */
  private async afterSliceUpdate(group: ProcessGroup, slice: Float32Array): Promise<void> {
    if (this.model.params.sharded) {
      this.travelFresh = false;
      return;
    }
    if (this.options.sharedWeights === true) await group.barrier();
    else await allGatherInChunks(group, slice, this.model.params.values, this.sliceSizes);
  }

  /**
   * One of AdamW's moments over the whole flat vector, as a run of byte parts
   * in flat order (a checkpoint writes them as they come). Sharded (ZeRO 1
   * to 3 over more than one rank), each rank's slice is broadcast from it in
   * parts of at most EXCHANGE_CHUNK_BYTES: collective, every rank of the group
   * draws the parts in the same order, and each part is one buffer refilled
   * (use it before drawing the next). Otherwise this rank's own moment.
   */
  momentParts(which: "m" | "v"): AsyncGenerator<Uint8Array> {
    const mine = this.optimizer[which];
    if (this.options.zero === 0 || this.group === null || this.group.size === 1) return wholeParts(mine);
    return this.flatParts(mine, 0, this.model.params.size);
  }

  /**
   * Parameter `name`'s weights as a run of byte parts: a view of them, or
   * (ZeRO-3 over more than one rank) broadcast from the ranks holding them,
   * as momentParts' (collective, one buffer refilled).
   */
  weightParts(name: string): AsyncGenerator<Uint8Array> {
    const { params } = this.model;
    if (!params.sharded) return wholeParts(params.value(name).data);
    const { offset, size } = params.slots.get(name)!;
    return this.flatParts(params.owned, offset, offset + size);
  }

  /** Flat elements [begin, end) of a vector sharded like the slices (`mine`: this rank's slice), each rank's part broadcast from it. */
  private async *flatParts(mine: Float32Array, begin: number, end: number): AsyncGenerator<Uint8Array> {
    const group = this.group!;
    const buffer = new Float32Array(Math.max(1, Math.min(end - begin, Math.floor(EXCHANGE_CHUNK_BYTES / Float32Array.BYTES_PER_ELEMENT))));
    let start = 0;
    for (let root = 0; root < group.size; root++) {
      const n = this.sliceSizes[root]!;
      const from = Math.max(begin, start);
      const to = Math.min(end, start + n);
      for (let at = from; at < to; at += buffer.length) {
        const part = buffer.subarray(0, Math.min(buffer.length, to - at));
        if (group.rank === root) part.set(mine.subarray(at - start, at - start + part.length));
        const got = await group.broadcast(new Tensor("float32", [part.length], part), { root });
        yield bytesOf(got.data as Float32Array);
      }
      start += n;
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

function bytesOf(x: Float32Array): Uint8Array {
  return new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
}

/** A vector as one part. */
async function* wholeParts(values: Float32Array): AsyncGenerator<Uint8Array> {
  yield bytesOf(values);
}

/** Throws unless the model's weights are held as ZeRO stage `zero` needs: sharded like the slices under ZeRO-3 over more than one rank, whole otherwise. */
function checkShard(params: TrainModel["params"], zero: ZeroStage, offset: number, length: number, ranks: number): void {
  const { shard } = params;
  if (zero === 3 && ranks > 1) {
    if (shard.offset !== offset || shard.length !== length)
      throw new TrainingError(
        `ZeRO-3 needs the model's weights sharded like the slices (GptOptions.shardOver with this rank of ${ranks}): it holds elements [${shard.offset}, ${shard.offset + shard.length}), this rank's slice is [${offset}, ${offset + length})`,
      );
  } else if (params.sharded) {
    throw new TrainingError(
      `the model's weights are sharded (a slice per rank): they need ZeRO stage 3 over more than one rank, got zero ${zero} over ${ranks}`,
    );
  }
}
