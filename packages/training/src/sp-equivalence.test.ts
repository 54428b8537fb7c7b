/**
 * One model definition, parallelised from outside: the one-device Gpt (no
 * group at all) trained for some steps, against the same model after
 * `parallelize` at SP 2 and 4 (uneven shards), ZeRO-1, a tied head,
 * all-gather attention and activation checkpointing.
 */
import { createLocalGroups } from "@ulysses/collectives";
import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import { Gpt, type GptConfig } from "@ulysses/model";
import { ParallelDims, parallelize, type SequenceParallelKind } from "@ulysses/parallel";
import { Rng } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { recallBatch } from "./data/recall-task.js";
import { learningRateAt } from "./lr-schedule.js";
import { Trainer } from "./train-step.js";

const config: GptConfig = { vocab: 32, hidden: 16, heads: 4, kvHeads: 2, layers: 2, mlp: "gelu", mlpRatio: 2, maxSeq: 64, tiedHead: false };
const task = { vocab: 32, seq: 22, pairs: 3, queries: 2 };

interface Options {
  steps?: number;
  zero1?: boolean;
  tiedHead?: boolean;
  attention?: SequenceParallelKind;
  checkpointing?: boolean;
}

/** Trains on one device (sp null) or on `sp` ranks of one local world; returns per-step losses and rank 0's final weights. */
async function train(sp: number | null, options: Options = {}) {
  const steps = options.steps ?? 20;
  const ops = new ReferenceOps();
  const modelConfig = { ...config, tiedHead: options.tiedHead ?? false };
  const loop = async (trainer: Trainer) => {
    const data = new Rng(99, 1);
    const losses: number[] = [];
    for (let step = 0; step < steps; step++) {
      const batch = recallBatch(task, 2, () => data.uniform());
      losses.push((await trainer.trainStep(batch, learningRateAt(step, { peak: 1e-2, warmupSteps: 3, totalSteps: steps }))).loss);
    }
    return { losses, weights: trainer.model.params.values };
  };
  const stepOptions = { ops, gradClip: 1, adamw: { weightDecay: 0.1 }, zero1: options.zero1 ?? false };
  const model = () => new Gpt(modelConfig, { ops, localAttention: new ReferenceAttention(), seed: 7, activationCheckpointing: options.checkpointing ?? false });
  if (sp === null) return loop(new Trainer(model(), stepOptions));
  const results = await Promise.all(
    createLocalGroups(sp).map(async (world) => {
      const dims = await ParallelDims.create(
        world,
        { sp, attention: options.attention ?? "ulysses" },
        { heads: config.heads, kvHeads: config.kvHeads, seqLength: task.seq },
      );
      return loop(new Trainer(parallelize(model(), dims), stepOptions));
    }),
  );
  for (const r of results.slice(1)) expect([...r.weights]).toEqual([...results[0]!.weights]);
  return results[0]!;
}

function maxRelative(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let scale = 0;
  let diff = 0;
  for (let i = 0; i < a.length; i++) {
    scale = Math.max(scale, Math.abs(b[i]!));
    diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
  }
  return diff / scale;
}

describe("sequence-parallel equivalence (local backend, reference kernels)", () => {
  it("10 steps of the one-device Gpt (no group) equal the same model parallelised at SP 2 and 4 within 1e-5", async () => {
    const single = await train(null, { steps: 10 });
    expect(single.losses[9]!).toBeLessThan(single.losses[0]!);
    for (const sp of [2, 4]) {
      const parallel = await train(sp, { steps: 10 });
      single.losses.forEach((loss, step) => expect(Math.abs(parallel.losses[step]! - loss) / loss, `sp ${sp} step ${step}`).toBeLessThanOrEqual(1e-5));
      expect(maxRelative(parallel.weights, single.weights), `weights at sp ${sp}`).toBeLessThanOrEqual(1e-5);
    }
  });

  it("SP=2 and SP=4 (uneven shards) train like SP=1: losses and weights within 1e-4", async () => {
    const single = await train(1);
    expect(single.losses[19]!).toBeLessThan(single.losses[0]!);
    for (const sp of [2, 4]) {
      const parallel = await train(sp);
      single.losses.forEach((loss, step) => expect(Math.abs(parallel.losses[step]! - loss) / loss, `sp ${sp} step ${step}`).toBeLessThanOrEqual(1e-4));
      expect(maxRelative(parallel.weights, single.weights)).toBeLessThanOrEqual(1e-4);
    }
  });

  it("ZeRO-1, a tied head, all-gather attention and activation checkpointing keep the equivalence", async () => {
    const single = await train(null, { tiedHead: true });
    for (const options of [{ zero1: true, attention: "allgather" as const }, { checkpointing: true }]) {
      const sharded = await train(2, { tiedHead: true, ...options });
      single.losses.forEach((loss, step) => expect(Math.abs(sharded.losses[step]! - loss) / loss).toBeLessThanOrEqual(1e-4));
      expect(maxRelative(sharded.weights, single.weights)).toBeLessThanOrEqual(1e-4);
    }
  });
});
