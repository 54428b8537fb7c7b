/**
 * The training loop the sequence-parallel and ZeRO equivalence tests share:
 * the test model trained on the recall task on one device (no group) or on
 * `sp` ranks of one local world, returning its losses, final weights, what
 * each rank held and (recording) every step's gradients and final logits.
 */
import { createLocalGroups } from "@ulysses/collectives";
import { ReferenceAttention, ReferenceOps, type LocalAttention } from "@ulysses/kernels";
import { Gpt, parameterCount, type GptConfig } from "@ulysses/model";
import { ParallelDims, parallelize, type ParallelDimsOptions, type SequenceParallelKind, type SequenceRun } from "@ulysses/parallel";
import { Rng, Tensor } from "@ulysses/tensors";
import { expect } from "vitest";
import { recallBatch } from "../data/recall-task.js";
import { learningRateAt } from "../lr-schedule.js";
import type { RankStateFloats } from "../memory-terms.js";
import type { GradientDtype } from "../slice-gradients.js";
import { Trainer, type ZeroStage } from "../train-step.js";

export const config: GptConfig = { vocab: 32, hidden: 16, heads: 4, kvHeads: 2, layers: 2, mlp: "gelu", mlpRatio: 2, maxSeq: 64, tiedHead: false };
export const task = { seq: 22, keys: 3, values: 4, vocab: 32 };

export interface Options {
  steps?: number;
  zero?: ZeroStage;
  /** One copy of the weights that every rank reads (Gpt's parameterValues, the Trainer's sharedWeights). */
  shared?: boolean;
  /** How ZeRO-2's slice gradients are stored (the Trainer's sliceGradientDtype). */
  gradientDtype?: GradientDtype;
  /** ZeRO-3: the dtype the weights travel in (the Trainer's weightGatherDtype). */
  gatherDtype?: GradientDtype;
  tiedHead?: boolean;
  attention?: SequenceParallelKind;
  checkpointing?: boolean;
  /** Hybrid degrees and the sequence layout (ParallelDims' options). */
  dims?: Pick<ParallelDimsOptions, "ulyssesDegree" | "ringDegree" | "layout">;
  kvHeads?: number;
  /** The local kernel (default ReferenceAttention; ring and hybrid need one whose backward reads the lse). */
  local?: () => LocalAttention;
  /** Keep every step's (reduced, clipped) gradients and the final logits in sequence order. */
  record?: boolean;
  /** The ops every rank shares (default ReferenceOps). */
  ops?: ReferenceOps;
  /** Tiled loss (Trainer's lossTileRows) and tiled MLP (Gpt's mlpTileRows); default untiled. */
  lossTileRows?: number;
  mlpTileRows?: number;
  /** Model fields on top of `config` (a Hugging Face family's attention variants). */
  model?: Partial<GptConfig>;
}

/** A run's per-step losses, final weights and (recording) gradients and logits; the fp32 state its rank held, and every rank's. */
export interface Run {
  losses: number[];
  weights: Float32Array;
  grads: Float32Array[];
  logits: Float32Array | null;
  runs: SequenceRun[] | null;
  held: RankStateFloats;
  /** Elements the model gathered in each step (ZeRO-3). */
  gatheredPerStep: number[];
  /** The first step's layer events in the order they happened: "gather 3 start", "forward 2 end", "backward 1 start", ... */
  events: string[];
  ranksHeld?: RankStateFloats[];
  /** The weights this rank holds (its slice under ZeRO-3, else all), and every rank's. */
  slice: Float32Array;
  slices?: Float32Array[];
}

/** Trains on one device (sp null) or on `sp` ranks of one local world; returns per-step losses and rank 0's final weights. */
export async function train(sp: number | null, options: Options = {}): Promise<Run> {
  const steps = options.steps ?? 20;
  const ops = options.ops ?? new ReferenceOps();
  const modelConfig = { ...config, tiedHead: options.tiedHead ?? false, kvHeads: options.kvHeads ?? config.kvHeads, ...options.model };
  const loop = async (trainer: Trainer, gpt: Gpt, runs: SequenceRun[] = [{ start: 0, length: task.seq }]): Promise<Run> => {
    const data = new Rng(99, 1);
    const losses: number[] = [];
    const grads: Float32Array[] = [];
    // the held gradient buffer's elements as each block's gradient run arrives (before) and is taken (after)
    const params = trainer.model.params;
    const seen = { before: 0, after: 0, gatheredParameter: 0, gathered: 0 };
    // ZeRO-3: the largest parameter gathered whole (the head's, or the table for its lookup), and the elements gathered per step
    const gatherParameter = params.gatherParameter.bind(params);
    params.gatherParameter = async (name) => {
      const t = await gatherParameter(name);
      if (params.sharded) seen.gatheredParameter = Math.max(seen.gatheredParameter, t.size);
      return t;
    };
    // the first step's order of the layers' gathers, forwards and backwards (the gathers named by the layer whose weights start at `at`)
    const events: string[] = [];
    const note = (event: string) => {
      if (gatheredPerStep.length === 0) events.push(event);
    };
    const { begin, end } = params.blockRange;
    const layerAt = new Map(gpt.blocks.map((_, l) => [begin + (l * (end - begin)) / gpt.blocks.length, l]));
    const gather = params.gather.bind(params);
    params.gather = async (at, into) => {
      seen.gathered += into.length;
      const layer = layerAt.get(at);
      if (layer !== undefined) note(`gather ${layer} start`);
      await gather(at, into);
      if (layer !== undefined) note(`gather ${layer} end`);
    };
    gpt.blocks.forEach((block, l) => {
      for (const pass of ["forward", "backward"] as const) {
        const run = block[pass].bind(block) as (...args: unknown[]) => Promise<unknown>;
        (block as unknown as Record<string, unknown>)[pass] = async (...args: unknown[]) => {
          note(`${pass} ${l} start`);
          const r = await run(...args);
          note(`${pass} ${l} end`);
          return r;
        };
      }
    });
    const gatheredPerStep: number[] = [];
    const accumulateRun = params.accumulateRun.bind(params);
    params.accumulateRun = async (first, values, ops) => {
      seen.before = Math.max(seen.before, params.heldGradientElements);
      await accumulateRun(first, values, ops);
      seen.after = Math.max(seen.after, params.heldGradientElements);
    };
    for (let step = 0; step < steps; step++) {
      const batch = recallBatch(task, 2, () => data.uniform());
      const before = seen.gathered;
      losses.push((await trainer.trainStep(batch, learningRateAt(step, { peak: 1e-2, warmupSteps: 3, totalSteps: steps }))).loss);
      gatheredPerStep.push(seen.gathered - before);
      if (options.record) grads.push(trainer.model.params.grads.slice());
    }
    const final = options.record ? await finalLogits(trainer, recallBatch(task, 2, () => data.uniform()).tokens, runs) : null;
    // the fp32 state this rank holds: weights, gradients (the flat vector and ZeRO-2's slice; through the blocks' backward and
    // between steps, and besides those from the loss until the blocks' backward), AdamW's moments
    const through = Math.max(seen.after, params.heldGradientElements);
    const held = {
      weights: params.owned.length,
      gatheredWeights: gpt.gatheredWeightElements,
      lossPhaseWeights: seen.gatheredParameter,
      gradients: through + (trainer.sliceGradients?.length ?? 0),
      lossPhaseGradients: seen.before - through,
      moments: trainer.optimizer.m.length + trainer.optimizer.v.length,
    };
    // sharded (ZeRO-3): every rank gathers the whole vector to compare it (as the gathers give it: in bf16, rounded)
    const weights = params.sharded ? new Float32Array(params.size) : params.values;
    if (params.sharded) await params.gather(0, weights);
    const slice = params.owned.slice();
    return { losses, weights, grads, logits: final?.logits ?? null, runs: final?.runs ?? null, held, gatheredPerStep, events, slice };
  };
  const stepOptions = {
    ops,
    gradClip: 1,
    adamw: { weightDecay: 0.1 },
    zero: options.zero ?? 0,
    sharedWeights: options.shared ?? false,
    sliceGradientDtype: options.gradientDtype ?? "float32",
    weightGatherDtype: options.gatherDtype ?? "float32",
    lossTileRows: options.lossTileRows ?? 0,
  };
  const sharedValues = options.shared ? new Float32Array(parameterCount(modelConfig)) : undefined;
  const local = options.local ?? (() => new ReferenceAttention());
  const model = (shardOver?: { rank: number; ranks: number }) =>
    new Gpt(modelConfig, {
      ...(shardOver !== undefined ? { shardOver } : {}),
      ops,
      localAttention: local(),
      seed: 7,
      activationCheckpointing: options.checkpointing ?? false,
      mlpTileRows: options.mlpTileRows ?? 0,
      ...(sharedValues !== undefined ? { parameterValues: sharedValues } : {}),
    });
  if (sp === null) {
    const gpt = model();
    return loop(new Trainer(gpt, stepOptions), gpt);
  }
  const results = await Promise.all(
    createLocalGroups(sp).map(async (world) => {
      const dims = await ParallelDims.create(
        world,
        { sp, attention: options.attention ?? "ulysses", ...options.dims },
        { heads: config.heads, kvHeads: modelConfig.kvHeads, seqLength: task.seq },
      );
      const gpt = model(options.zero === 3 ? { rank: world.rank, ranks: world.size } : undefined);
      return loop(new Trainer(parallelize(gpt, dims), stepOptions), gpt, dims.runs(task.seq)[dims.spGroup.rank]!);
    }),
  );
  for (const r of results.slice(1)) expect([...r.weights]).toEqual([...results[0]!.weights]);
  if (!options.record) return { ...results[0]!, ranksHeld: results.map((r) => r.held), slices: results.map((r) => r.slice) };
  // every rank's logits rows are its tokens: put them back in sequence order
  const vocab = config.vocab;
  const logits = new Float32Array(2 * task.seq * vocab);
  results.forEach((r) => {
    const rows = r.logits!;
    const runs = r.runs!;
    const perRow = rows.length / vocab / 2;
    for (let b = 0; b < 2; b++) {
      let at = 0;
      for (const run of runs)
        for (let t = 0; t < run.length; t++, at++)
          logits.set(rows.subarray((b * perRow + at) * vocab, (b * perRow + at + 1) * vocab), (b * task.seq + run.start + t) * vocab);
    }
  });
  return { ...results[0]!, logits };
}

/** The trained model's logits [b * s_r, vocab] on `tokens` (this rank's shard of them when parallel, at `runs`) through the model contract. */
async function finalLogits(trainer: Trainer, tokens: Tensor<"int32">, runs: SequenceRun[]): Promise<{ logits: Float32Array; runs: SequenceRun[] }> {
  const model = trainer.model;
  const labels = new Tensor("int32", tokens.shape, new Int32Array(tokens.size));
  const { context } = await model.forwardBatch({ tokens, labels }, { logits: true });
  const logits = context.logits!.data.slice();
  model.release(context);
  return { logits, runs };
}
