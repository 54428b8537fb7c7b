/**
 * The model's components and the sequence-parallel schemes are registries:
 * a norm, an MLP and a scheme from outside the packages, each one file
 * (testing-fixtures/toy-rms-norm.ts, toy-swiglu.ts, replicated-scheme.ts)
 * plus one registration, train like the built-ins. References: the built-in
 * "rmsnorm" and "swiglu" (the ops' own kernels) for the toy norm and MLP, and
 * the one-device run for the toy scheme; losses of every step and the final
 * weights within 1e-5.
 */
import { registerMlp, registerNorm } from "@ulysses/block";
import { createLocalGroups } from "@ulysses/collectives";
import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import { Gpt, type GptConfig } from "@ulysses/model";
import { ParallelDims, parallelDimsProblems, parallelize, registerSequenceParallelScheme, sequenceParallelSchemeNames } from "@ulysses/parallel";
import { Rng } from "@ulysses/tensors";
import { beforeAll, describe, expect, it } from "vitest";
import { recallBatch } from "./data/recall-task.js";
import { learningRateAt } from "./lr-schedule.js";
import { replicatedScheme } from "./testing-fixtures/replicated-scheme.js";
import { maxRelative } from "./testing-fixtures/compare.js";
import { toyRmsNorm } from "./testing-fixtures/toy-rms-norm.js";
import { toySwiglu } from "./testing-fixtures/toy-swiglu.js";
import type { TrainModel } from "./loss.js";
import { Trainer } from "./train-step.js";

const task = { seq: 18, keys: 3, values: 4, vocab: 32 };
const base: GptConfig = { vocab: 32, hidden: 16, heads: 4, kvHeads: 2, layers: 2, mlp: "swiglu", mlpRatio: 2, maxSeq: 64, tiedHead: false };
const STEPS = 6;

beforeAll(() => {
  registerNorm(toyRmsNorm);
  registerMlp(toySwiglu);
  registerSequenceParallelScheme(replicatedScheme);
});

/** Losses of every step and the final weights of `STEPS` AdamW steps on the recall task. */
async function train(model: TrainModel): Promise<{ losses: number[]; weights: Float32Array }> {
  const trainer = new Trainer(model, { ops: new ReferenceOps(), gradClip: 1, adamw: { weightDecay: 0.1 }, zero: 0 });
  const data = new Rng(5, 1);
  const losses: number[] = [];
  for (let step = 0; step < STEPS; step++) {
    const batch = recallBatch(task, 2, () => data.uniform());
    losses.push((await trainer.trainStep(batch, learningRateAt(step, { peak: 1e-2, warmupSteps: 2, totalSteps: STEPS }))).loss);
  }
  return { losses, weights: model.params.values };
}

const gpt = (norm: string, mlp = "swiglu") => new Gpt({ ...base, norm, mlp }, { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), seed: 3 });

function expectSame(run: { losses: number[]; weights: Float32Array }, reference: { losses: number[]; weights: Float32Array }, what: string): void {
  reference.losses.forEach((loss, step) => expect(Math.abs(run.losses[step]! - loss) / loss, `${what}, step ${step}`).toBeLessThanOrEqual(1e-5));
  expect(maxRelative(run.weights, reference.weights), `${what}, weights`).toBeLessThanOrEqual(1e-5);
}

describe("registries: a norm, an MLP and a sequence-parallel scheme from outside the packages", () => {
  it("a registered toy norm trains like the built-in rmsnorm (one device)", async () => {
    const reference = await train(gpt("rmsnorm"));
    expect(reference.losses[STEPS - 1]!).toBeLessThan(reference.losses[0]!);
    expectSame(await train(gpt("toy-rms")), reference, "toy-rms against rmsnorm");
  });

  it("a registered toy MLP trains like the built-in swiglu (one device), and its weights are the same tensors", async () => {
    const reference = await train(gpt("rmsnorm"));
    const toy = gpt("rmsnorm", "toy-swiglu");
    expect(toy.params.specs.map((s) => s.name)).toEqual(gpt("rmsnorm").params.specs.map((s) => s.name));
    expectSame(await train(toy), reference, "toy-swiglu against swiglu");
  });

  it("a registered toy scheme trains like one device at SP 2 and 3 (uneven shards), with the toy norm", async () => {
    expect(sequenceParallelSchemeNames()).toContain("replicated");
    const reference = await train(gpt("rmsnorm"));
    for (const sp of [2, 3]) {
      const results = await Promise.all(
        createLocalGroups(sp).map(async (world) => {
          const dims = await ParallelDims.create(world, { sp, attention: "replicated" }, { heads: base.heads, kvHeads: base.kvHeads, seqLength: task.seq });
          expect(dims.attention).toBe("replicated");
          return train(parallelize(gpt("toy-rms"), dims));
        }),
      );
      for (const r of results) expectSame(r, reference, `replicated at sp ${sp}`);
    }
  });

  it("the registry refuses an unknown scheme, norm and MLP, naming the registered ones", () => {
    const problems = parallelDimsProblems({ sp: 2, attention: "nope" }, { worldSize: 2, heads: 4, kvHeads: 2, seqLength: 8 });
    expect(problems).toEqual(["attention must be one of ulysses, allgather, ring, hybrid, replicated, got 'nope'"]);
    expect(() => gpt("nope")).toThrow("norm must be one of 'layernorm', 'rmsnorm', 'toy-rms', got 'nope'");
    expect(() => registerNorm(toyRmsNorm)).toThrow("a norm named 'toy-rms' is registered already");
    expect(() => gpt("rmsnorm", "relu")).toThrow("mlp must be one of 'gelu', 'swiglu', 'toy-swiglu', got 'relu'");
    expect(() => registerMlp(toySwiglu)).toThrow("an MLP named 'toy-swiglu' is registered already");
    expect(() => registerMlp({ ...toySwiglu, name: "up-first", projections: ["mlp.up", "mlp.gate"] })).toThrow(
      "MLP 'up-first': its projections are mlp.up, or mlp.gate then mlp.up, got [mlp.up, mlp.gate]",
    );
    expect(() => registerSequenceParallelScheme(replicatedScheme)).toThrow("a sequence-parallel scheme named 'replicated' is registered already");
  });
});
