import { describe, expect, it } from "vitest";
import { createLocalGroups } from "@ulysses/collectives";
import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import { Rng } from "@ulysses/tensors";
import { recallBatch } from "./data/recall-task.js";
import { shardBatch } from "./data/batch.js";
import { Gpt } from "./gpt.js";
import type { GptConfig } from "./gpt-config.js";
import { learningRateAt } from "./lr-schedule.js";
import { Trainer } from "./train-step.js";

const config: GptConfig = { vocab: 32, hidden: 16, heads: 4, kvHeads: 2, layers: 2, mlp: "gelu", mlpRatio: 2, maxSeq: 64, tiedHead: false, attention: "ulysses" };
const task = { vocab: 32, seq: 22, pairs: 3, queries: 2 };
const STEPS = 20;

/** Trains STEPS steps on `sp` ranks of one local world; returns per-step losses and rank 0's final weights. */
async function train(sp: number, options: { zero1?: boolean; tiedHead?: boolean; attention?: "ulysses" | "allgather"; checkpointing?: boolean } = {}) {
  const groups = createLocalGroups(sp);
  const ops = new ReferenceOps();
  const cfg = { ...config, tiedHead: options.tiedHead ?? false, attention: options.attention ?? "ulysses" };
  const runs = groups.map(async (group) => {
    const model = new Gpt(cfg, { ops, localAttention: new ReferenceAttention(), group, seed: 7, activationCheckpointing: options.checkpointing ?? false });
    const trainer = new Trainer(model, { world: group, ops, gradClip: 1, adamw: { weightDecay: 0.1 }, zero1: options.zero1 ?? false });
    const data = new Rng(99, 1);
    const losses: number[] = [];
    for (let step = 0; step < STEPS; step++) {
      const batch = recallBatch(task, 2, () => data.uniform());
      const r = await trainer.trainStep(shardBatch(batch, group.rank, group.size), learningRateAt(step, { peak: 1e-2, warmupSteps: 3, totalSteps: STEPS }));
      losses.push(r.loss);
    }
    return { losses, weights: model.params.values };
  });
  const results = await Promise.all(runs);
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
  it("SP=2 and SP=4 (uneven shards) train like SP=1: losses and weights within 1e-4", async () => {
    const single = await train(1);
    expect(single.losses[STEPS - 1]!).toBeLessThan(single.losses[0]!);
    for (const sp of [2, 4]) {
      const parallel = await train(sp);
      single.losses.forEach((loss, step) => expect(Math.abs(parallel.losses[step]! - loss) / loss, `sp ${sp} step ${step}`).toBeLessThanOrEqual(1e-4));
      expect(maxRelative(parallel.weights, single.weights)).toBeLessThanOrEqual(1e-4);
    }
  });

  it("ZeRO-1, a tied head, all-gather attention and activation checkpointing keep the equivalence", async () => {
    const single = await train(1, { tiedHead: true });
    for (const options of [{ zero1: true, attention: "allgather" as const }, { checkpointing: true }]) {
      const sharded = await train(2, { tiedHead: true, ...options });
      single.losses.forEach((loss, step) => expect(Math.abs(sharded.losses[step]! - loss) / loss).toBeLessThanOrEqual(1e-4));
      expect(maxRelative(sharded.weights, single.weights)).toBeLessThanOrEqual(1e-4);
    }
  });
});
