/**
 * One optimisation step, SPMD: every rank of `world` runs it with its own
 * shard. Gradients (unreduced, in the model's flat gradient) are summed over
 * the world with one allReduce — or, under ZeRO-1, reduce-scattered so each
 * rank gets the summed slice it owns — then clipped by the global norm,
 * AdamW-updated, and (ZeRO-1) the updated slices are all-gathered back into
 * every rank's full parameter vector.
 */
import type { ProcessGroup } from "@ulysses/collectives";
import type { BlockOps } from "@ulysses/kernels";
import { Tensor, evenSplitSizes } from "@ulysses/tensors";
import { AdamW, type AdamWOptions } from "./adamw.js";
import type { BatchShard } from "./data/batch.js";
import { clipGradNorm } from "./grad-clip.js";
import type { Gpt } from "./gpt.js";
import { lossAndGradients, type LossResult } from "./loss.js";

export interface TrainStepOptions {
  /** Every rank of the run (SP x DP); gradients and the loss are summed over it. */
  world: ProcessGroup;
  ops: BlockOps;
  /** Global gradient-norm clip (0: off). */
  gradClip: number;
  adamw: AdamWOptions;
  /** Shard the optimizer state over the world (ZeRO stage 1). */
  zero1: boolean;
}

export interface StepResult extends LossResult {
  gradNorm: number;
}

export class Trainer {
  readonly model: Gpt;
  readonly optimizer: AdamW;
  readonly options: TrainStepOptions;
  /** Flat-vector elements owned by each world rank (ZeRO-1), else one slice of everything. */
  readonly sliceSizes: number[];

  constructor(model: Gpt, options: TrainStepOptions) {
    this.model = model;
    this.options = options;
    const total = model.params.size;
    this.sliceSizes = options.zero1 ? evenSplitSizes(total, options.world.size) : [total];
    const rank = options.zero1 ? options.world.rank : 0;
    const offset = this.sliceSizes.slice(0, rank).reduce((a, b) => a + b, 0);
    const length = this.sliceSizes[rank]!;
    this.optimizer = new AdamW({ offset, length, decayMask: model.params.decayMask(offset, length) }, options.adamw);
  }

  /** Steps taken so far. */
  get step(): number {
    return this.optimizer.step;
  }

  async trainStep(shard: BatchShard, lr: number): Promise<StepResult> {
    const { params } = this.model;
    const { world, zero1, gradClip } = this.options;
    params.grads.fill(0);
    const result = await lossAndGradients(this.model, this.options.ops, shard, world);
    const { offset, length } = this.optimizer;
    let gradNorm: number;
    if (zero1 && world.size > 1) {
      const mine = await world.reduceScatter(new Tensor("float32", [params.size], params.grads), { op: "sum", sizes: this.sliceSizes });
      const grads = mine.data as Float32Array;
      gradNorm = await clipGradNorm(grads, gradClip, { begin: 0, end: length }, world);
      const slice = params.values.slice(offset, offset + length);
      this.optimizer.update(slice, grads, lr, true);
      const gathered = await world.allGather(new Tensor("float32", [length], slice), { sizes: this.sliceSizes });
      params.values.set(gathered.data as Float32Array);
    } else {
      if (world.size > 1) await world.allReduce(new Tensor("float32", [params.size], params.grads), { op: "sum" });
      gradNorm = await clipGradNorm(params.grads, gradClip);
      this.optimizer.update(params.values, params.grads, lr);
    }
    return { ...result, gradNorm };
  }

  /** The full optimizer moments (gathered over the world under ZeRO-1; collective then). */
  async fullMoments(): Promise<{ m: Float32Array; v: Float32Array }> {
    const { world, zero1 } = this.options;
    if (!zero1 || world.size === 1) return { m: this.optimizer.m, v: this.optimizer.v };
    const gather = async (x: Float32Array) => (await world.allGather(new Tensor("float32", [x.length], x), { sizes: this.sliceSizes })).data as Float32Array;
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
