import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { readSafetensors } from "@ulysses/model";
import { DEFAULTS, type TrainConfig } from "./config.js";
import { RankPool } from "./rank-pool.js";
import { runTraining } from "./run.js";
import { lossCurve, spawnTrainer, tinyFlags } from "./testing-fixtures/cli.js";
import { expectRunsClose, type RunOutcome } from "./testing-fixtures/compare-runs.js";

const base: TrainConfig = {
  ...DEFAULTS,
  backend: "local",
  seq: 30,
  layers: 1,
  hidden: 16,
  heads: 4,
  kvHeads: 2,
  steps: 8,
  warmup: 2,
  checkpointEvery: 0,
  export: false,
  keys: 3,
  values: 4,
  threads: 1,
};

/** Every run directory of this file, removed when it ends. */
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "parallel-equivalence-"));
afterAll(() => fs.rmSync(scratch, { recursive: true, force: true }));

async function train(overrides: Partial<TrainConfig>) {
  const config = { ...base, ...overrides };
  const outDir = fs.mkdtempSync(path.join(scratch, "dp-"));
  const result = await runTraining({
    config,
    outDir,
    resumeFile: null,
    startPool: () => RankPool.start({ ...config, backend: "local" }, null),
    log: () => undefined,
  });
  return { losses: result.metrics.map((m) => m.loss), weights: readSafetensors(result.checkpoint).tensors, metrics: result.metrics };
}

/** ||b - a|| / ||a|| over the checkpoints' weights (the AdamW moments left out). */
function weightDistance(a: RunOutcome, b: RunOutcome): number {
  let diff = 0;
  let norm = 0;
  for (const [name, t] of a.weights) {
    if (name.startsWith("optimizer")) continue;
    const other = b.weights.get(name)!.data as Float32Array;
    (t.data as Float32Array).forEach((v, i) => {
      diff += (v - other[i]!) ** 2;
      norm += v * v;
    });
  }
  return Math.sqrt(diff / norm);
}

/** Losses and weights within 1e-4 (relative); with `optimizer`, the checkpoint's AdamW moments too (ZeRO-1 gathers them from the ranks' slices). */
function expectClose(a: RunOutcome, b: RunOutcome, optimizer = false): void {
  expectRunsClose(a, b, { tolerance: 1e-4, optimizer });
}

describe("parallel equivalence with the ONNX Runtime kernels the trainer uses", () => {
  it("20 steps at SP 1, 2 and 4: losses and final weights within 1e-4", async () => {
    const single = await train({ sp: 1, steps: 20, batch: 2 });
    expect(single.losses[19]!).toBeLessThan(single.losses[0]!);
    expectClose(single, await train({ sp: 2, steps: 20, batch: 2 }));
    expectClose(single, await train({ sp: 4, steps: 20, batch: 2 }));
  });

  it("ring attention at SP 2 and 4, and SP 8 with 4 heads (past the head count): losses and final weights within 1e-4 of one rank", async () => {
    const single = await train({ sp: 1, steps: 10, batch: 2 });
    for (const sp of [2, 4, 8]) expectClose(single, await train({ sp, steps: 10, batch: 2, attention: "ring" }));
  });

  it("hybrid Ulysses x ring at SP 4 (2 x 2, 1 x 4, 4 x 1; zigzag and contiguous) and SP 8 (2 x 4, 4 heads and 2 kv heads: past the head count): losses and final weights within 1e-4 of one rank", async () => {
    const single = await train({ sp: 1, steps: 10, batch: 2 });
    expect(single.losses[9]!).toBeLessThan(single.losses[0]!);
    for (const run of [
      { sp: 4, ulyssesDegree: 2 },
      { sp: 4, ulyssesDegree: 2, sequenceLayout: "contiguous" as const },
      { sp: 4, ulyssesDegree: 1 },
      { sp: 4, ulyssesDegree: 4 },
      { sp: 8, ulyssesDegree: 2 },
    ])
      expectClose(single, await train({ ...run, steps: 10, batch: 2, attention: "hybrid" }));
  });

  it("Ulysses pipelined over 2 head groups (--ulysses-head-groups 2) at SP 2: losses and final weights within 1e-4 of one rank", async () => {
    const single = await train({ sp: 1, steps: 10, batch: 2 });
    expectClose(single, await train({ sp: 2, steps: 10, batch: 2, ulyssesHeadGroups: 2 }));
  });

  it("sp 2 x dp 2 (batch 2 per group) and ZeRO-1 over the 4 ranks train like one rank with the global batch of 4 (the checkpoint's moments too)", async () => {
    const single = await train({ sp: 1, dp: 1, batch: 4 });
    expectClose(single, await train({ sp: 2, dp: 2, batch: 2, zero: 1 }), true);
  });

  it("sp 2 x dp 2 at ZeRO-2 (with and without shared weights) and ZeRO-3, over 20 steps: ZeRO-0's losses, weights and moments within 1e-5", async () => {
    const zero0 = await train({ sp: 2, dp: 2, batch: 1, steps: 20 });
    expect(zero0.losses[19]!).toBeLessThan(zero0.losses[0]!);
    const runs = new Map<string, Awaited<ReturnType<typeof train>>>();
    for (const stage of [{ zero: 2 }, { zero: 3 }, { zero: 2, sharedWeights: true }, { zero: 1, sharedWeights: true }]) {
      const run = await train({ sp: 2, dp: 2, batch: 1, steps: 20, ...stage });
      expectRunsClose(zero0, run, { tolerance: 1e-5, optimizer: true });
      runs.set(JSON.stringify(stage), run);
    }
    // ZeRO-3's gathers run on a group of their own: their bytes count in the step's (ZeRO-2 moves the gradients as ZeRO-3 does and
    // gathers the weights once per step, ZeRO-3 layer by layer, more than once), and their time only as far as a step waited for them
    const [zero2, zero3] = [runs.get('{"zero":2}')!.metrics, runs.get('{"zero":3}')!.metrics];
    zero3.forEach((m, i) => {
      expect(m.commBytesPerRank, `step ${m.step}`).toBeGreaterThan(zero2[i]!.commBytesPerRank);
      expect(m.commMs).toBeGreaterThan(0);
      expect(m.commMs).toBeLessThanOrEqual(m.stepMs);
    });
  });

  it("sp 2 x dp 2 at ZeRO-2 with activation checkpointing and --precision bf16 (the slices' gradients and the kept block inputs in bf16) over 20 steps: ZeRO-0's losses within 1e-3, weights within 5e-3 in norm; at ZeRO-3 (the weights gathered in bf16 too) within 2e-2", async () => {
    const zero0 = await train({ sp: 2, dp: 2, batch: 1, steps: 20, activationCheckpointing: true });
    expect(zero0.losses[19]!).toBeLessThan(zero0.losses[0]!);
    for (const [stage, weightTolerance] of [[{ zero: 2, sharedWeights: true }, 5e-3] as const, [{ zero: 3 }, 2e-2] as const]) {
      const bf16 = await train({ sp: 2, dp: 2, batch: 1, steps: 20, activationCheckpointing: true, precision: "bf16", ...stage });
      zero0.losses.forEach((loss, step) => expect(Math.abs(bf16.losses[step]! - loss) / loss, `zero ${stage.zero} step ${step}`).toBeLessThanOrEqual(1e-3));
      const distance = weightDistance(zero0, bf16);
      expect(distance, `zero ${stage.zero}`).toBeLessThanOrEqual(weightTolerance);
      expect(distance).toBeGreaterThan(0);
    }
  });

  it("sp 2 at ZeRO-2 with attention in head groups and MLP tiles, no checkpointing, --precision bf16 (each block's input and MLP input kept in bf16) over 20 steps: float32's losses within 1e-3, weights within 5e-3 in norm", async () => {
    const grouped = { sp: 2, batch: 2, steps: 20, zero: 2, sharedWeights: true, tileAttention: 2, tileMlp: 4 } as const;
    const fp32 = await train(grouped);
    expect(fp32.losses[19]!).toBeLessThan(fp32.losses[0]!);
    const bf16 = await train({ ...grouped, precision: "bf16" });
    fp32.losses.forEach((loss, step) => expect(Math.abs(bf16.losses[step]! - loss) / loss, `step ${step}`).toBeLessThanOrEqual(1e-3));
    const distance = weightDistance(fp32, bf16);
    expect(distance).toBeLessThanOrEqual(5e-3);
    expect(distance).toBeGreaterThan(0);
  });

  it("sp 2 with the head groups' outputs kept (--keep-attention-outputs) over 20 steps: the recompute's losses and weights bit for bit in float32; under --precision bf16, float32's losses within 1e-3, weights within 5e-3 in norm", async () => {
    const grouped = { sp: 2, batch: 2, steps: 20, zero: 2, sharedWeights: true, tileAttention: 2, tileMlp: 4 } as const;
    const recomputed = await train(grouped);
    const kept = await train({ ...grouped, keepAttentionOutputs: true });
    expect(kept.losses).toEqual(recomputed.losses);
    expect(weightDistance(recomputed, kept)).toBe(0);
    const bf16 = await train({ ...grouped, keepAttentionOutputs: true, precision: "bf16" });
    recomputed.losses.forEach((loss, step) => expect(Math.abs(bf16.losses[step]! - loss) / loss, `step ${step}`).toBeLessThanOrEqual(1e-3));
    expect(weightDistance(recomputed, bf16)).toBeLessThanOrEqual(5e-3);
  });

  it("resumed across ZeRO stages and degrees (sp 2 x dp 2 ZeRO-2 shared to step 6, then sp 4 ZeRO-1): the uninterrupted ZeRO-0 curve within 1e-5", async () => {
    const whole = await train({ sp: 2, dp: 2, batch: 1, steps: 12 });
    const outDir = fs.mkdtempSync(path.join(scratch, "zero-resume-"));
    const run = (config: TrainConfig, resumeFile: string | null, stopAfter?: number) =>
      runTraining({ config, outDir, resumeFile, startPool: () => RankPool.start(config, resumeFile), log: () => undefined, stopAfter });
    const first = await run({ ...base, sp: 2, dp: 2, batch: 1, steps: 12, zero: 2, sharedWeights: true }, null, 6);
    expect(first.interrupted).toBe(true);
    // the same global batch of 2 rows on one SP group of 4
    const rest = await run({ ...base, sp: 4, dp: 1, batch: 2, steps: 12, zero: 1 }, first.checkpoint);
    expect(rest.metrics.map((m) => m.step)).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
    expectRunsClose(
      whole,
      { losses: rest.metrics.map((m) => m.loss), weights: readSafetensors(rest.checkpoint).tensors },
      { tolerance: 1e-5, optimizer: true },
    );
  });

  it("ZeRO-3 written and resumed over other shards (sp 2 x dp 2 to step 6, then sp 2 x dp 1): the uninterrupted ZeRO-0 curve within 1e-5, and the export holds the checkpoint's weights", async () => {
    const whole = await train({ sp: 2, dp: 2, batch: 1, steps: 12 });
    const outDir = fs.mkdtempSync(path.join(scratch, "zero3-resume-"));
    const run = (config: TrainConfig, resumeFile: string | null, stopAfter?: number) =>
      runTraining({ config, outDir, resumeFile, startPool: () => RankPool.start(config, resumeFile), log: () => undefined, stopAfter });
    const first = await run({ ...base, sp: 2, dp: 2, batch: 1, steps: 12, zero: 3 }, null, 6);
    expect(first.interrupted).toBe(true);
    // the same global batch of 2 rows on 2 ranks: each holds half the weights where it held a quarter
    const rest = await run({ ...base, sp: 2, dp: 1, batch: 2, steps: 12, zero: 3, export: true }, first.checkpoint);
    const weights = readSafetensors(rest.checkpoint).tensors;
    expectRunsClose(whole, { losses: rest.metrics.map((m) => m.loss), weights }, { tolerance: 1e-5, optimizer: true });
    // the Hugging Face export (our family's names and layouts) holds the same values as the checkpoint's weights
    const sorted = (arrays: Iterable<Float32Array>) => Float32Array.from([...arrays].flatMap((a) => [...a])).sort();
    const exported = readSafetensors(path.join(outDir, "hf", "model.safetensors")).tensors;
    const checkpointed = [...weights].filter(([name]) => !name.startsWith("optimizer")).map(([, t]) => t.data as Float32Array);
    expect(sorted([...exported.values()].map((t) => t.data as Float32Array))).toEqual(sorted(checkpointed));
    expect(fs.existsSync(path.join(outDir, "model.onnx"))).toBe(true);
  });
});

describe("past the head count on the threads backend (one worker thread per rank)", () => {
  /** The loss of every step of `pnpm train` with `flags` (a later flag wins over tinyFlags). */
  async function curve(flags: string[]): Promise<number[]> {
    const out = fs.mkdtempSync(path.join(scratch, "threads-"));
    const args = [
      ...tinyFlags(4),
      "--kv-heads",
      "2",
      "--steps",
      "6",
      "--warmup",
      "2",
      "--log-every",
      "1",
      "--no-export",
      "--checkpoint-every",
      "0",
      ...flags,
      "--out",
      out,
    ];
    const run = await spawnTrainer(args);
    expect(run.code, run.stdout + run.stderr).toBe(0);
    return lossCurve(out);
  }

  it("SP 8 with 4 heads and 2 kv heads (hybrid 2 x 4, and ring): the loss curve of one rank within 1e-4", async () => {
    const single = await curve(["--sp", "1"]);
    expect(single[5]).toBeLessThan(single[0]!);
    for (const flags of [
      ["--sp", "8", "--attention", "hybrid", "--ulysses-degree", "2"],
      ["--sp", "8", "--attention", "ring"],
    ]) {
      const got = await curve(["--backend", "threads", ...flags]);
      single.forEach((loss, step) => expect(Math.abs(got[step]! - loss) / loss, `${flags.join(" ")} step ${step}`).toBeLessThanOrEqual(1e-4));
    }
  }, 240_000);

  it("sp 2 x dp 2 with ZeRO-2 and one shared copy of the weights (worker threads reading the native addon's process-wide memory): the ZeRO-0 loss curve within 1e-5", async () => {
    const grid = ["--backend", "threads", "--sp", "2", "--dp", "2", "--batch", "1"];
    const zero0 = await curve(grid);
    expect(zero0[5]).toBeLessThan(zero0[0]!);
    const shared = await curve([...grid, "--zero", "2", "--shared-weights"]);
    zero0.forEach((loss, step) => expect(Math.abs(shared[step]! - loss) / loss, `step ${step}`).toBeLessThanOrEqual(1e-5));
  }, 240_000);
});
