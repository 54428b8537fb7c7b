import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { readSafetensors } from "@ulysses/model";
import { DEFAULTS, type TrainConfig } from "./config.js";
import { RankPool } from "./rank-pool.js";
import { runTraining } from "./run.js";

const quiet = () => undefined;

const config: TrainConfig = {
  ...DEFAULTS,
  backend: "local",
  sp: 2,
  seq: 40,
  layers: 2,
  hidden: 32,
  heads: 4,
  kvHeads: 2,
  batch: 2,
  steps: 20,
  warmup: 3,
  checkpointEvery: 0,
  export: false,
  vocab: 32,
  keys: 4,
  values: 6,
  threads: 1,
};

async function run(outDir: string, options: { resume?: string; stopAfter?: number } = {}) {
  const resumeFile = options.resume ?? null;
  return runTraining({
    config,
    outDir,
    resumeFile,
    startPool: () => RankPool.start({ ...config, backend: "local" }, resumeFile),
    log: quiet,
    stopAfter: options.stopAfter,
  });
}

describe("checkpoint and resume", () => {
  it("stopping at step 10 and resuming reproduces the uninterrupted run bit for bit", async () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), "resume-"));
    const whole = await run(path.join(root, "whole"));
    fs.mkdirSync(path.join(root, "split"));
    const first = await run(path.join(root, "split"), { stopAfter: 10 });
    expect(first.interrupted).toBe(true);
    expect(first.metrics.map((m) => m.step)).toEqual(Array.from({ length: 10 }, (_, i) => i + 1));
    const rest = await run(path.join(root, "split"), { resume: first.checkpoint });
    expect(rest.interrupted).toBe(false);
    // metrics.jsonl keeps steps 1..10 of the first part and appends 11..20: no row lost or repeated
    expect(rest.metrics.map((m) => m.step)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(rest.metrics.map((m) => m.step)).toEqual(whole.metrics.map((m) => m.step));
    expect(rest.metrics.map((m) => m.loss)).toEqual(whole.metrics.map((m) => m.loss));
    expect(rest.metrics.map((m) => m.gradNorm)).toEqual(whole.metrics.map((m) => m.gradNorm));
    const a = readSafetensors(whole.checkpoint);
    const b = readSafetensors(rest.checkpoint);
    expect(b.metadata.step).toBe("20");
    expect(b.metadata.rng).toBe(a.metadata.rng);
    expect([...b.tensors.keys()]).toEqual([...a.tensors.keys()]);
    for (const [name, t] of a.tensors) expect([...b.tensors.get(name)!.data], name).toEqual([...t.data]);
    for (const file of ["metrics.jsonl", "loss.svg", "summary.txt"]) expect(fs.existsSync(path.join(root, "split", file))).toBe(true);
  });
});
