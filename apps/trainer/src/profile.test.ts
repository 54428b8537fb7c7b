import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { DEFAULTS, type TrainConfig } from "./config.js";
import { RankPool } from "./rank-pool.js";
import { runTraining } from "./run.js";

// the default model (2 layers, SP 2 Ulysses), small and short
const base: TrainConfig = {
  ...DEFAULTS,
  backend: "local",
  seq: 64,
  hidden: 32,
  batch: 2,
  keys: 4,
  values: 8,
  steps: 2,
  warmup: 1,
  checkpointEvery: 0,
  export: false,
  threads: 1,
};

async function train(config: TrainConfig) {
  const outDir = fs.mkdtempSync(path.join(os.tmpdir(), "profile-"));
  const lines: string[] = [];
  const result = await runTraining({ config, outDir, resumeFile: null, startPool: () => RankPool.start(config, null), log: (line) => lines.push(line) });
  return { ...result, lines, outDir };
}

describe("--profile", () => {
  it("counts each layer's attention once a step, twice under activation checkpointing (its recompute), and sums no more than the step", async () => {
    const layers = DEFAULTS.layers;
    for (const activationCheckpointing of [false, true]) {
      const { metrics, summary, outDir } = await train({ ...base, profile: true, activationCheckpointing });
      for (const m of metrics) {
        const ops = m.ops!;
        expect(ops["attention.forward"]!.calls).toBe(activationCheckpointing ? 2 * layers : layers);
        expect(ops["attention.backward"]!.calls).toBe(layers);
        // q, k, v, the output projection and the MLP's two in each layer, and the tied head; the recompute skips the MLP's
        // output projection, whose output no backward reads
        expect(ops["ops.linearForward"]!.calls).toBe(6 * layers + 1 + (activationCheckpointing ? 5 * layers : 0));
        const total = Object.values(ops).reduce((sum, t) => sum + t.ms, 0);
        expect(total).toBeGreaterThan(0);
        expect(total).toBeLessThanOrEqual(m.stepMs);
      }
      // the run directory's metrics carry them, and the summary the last step's table
      const written = fs
        .readFileSync(path.join(outDir, "metrics.jsonl"), "utf8")
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line));
      expect(written[1].ops["attention.backward"].calls).toBe(layers);
      expect(summary).toMatch(/step 2, world rank 0 \(--profile\)/);
      expect(summary).toMatch(/\| attention\.backward +\| 2 calls, /);
      expect(fs.readFileSync(path.join(outDir, "summary.txt"), "utf8")).toContain("waiting in collectives (commMs)");
    }
  });

  it("is off by default: no ops in the metrics, no table", async () => {
    const { metrics, summary } = await train({ ...base, steps: 1 });
    expect(metrics[0]!.ops).toBeUndefined();
    expect(summary).not.toContain("--profile");
  });
});
