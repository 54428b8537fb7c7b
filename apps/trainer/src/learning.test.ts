import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { DEFAULTS, type TrainConfig } from "./config.js";
import { InProcessPool } from "./rank-pool.js";
import { runTraining } from "./run.js";

// A shortened default run: the default task and architecture (SP 2, recall,
// 2 layers, causal Ulysses attention), scaled down in width, length and steps
// so it takes seconds. Chance accuracy is 1 / (vocab / 4) = 12.5%.
const config: TrainConfig = {
  ...DEFAULTS,
  backend: "local",
  seq: 48,
  hidden: 32,
  batch: 8,
  pairs: 2,
  queries: 2,
  steps: 150,
  warmup: 10,
  lr: 5e-3,
  checkpointEvery: 0,
  export: false,
  threads: 1,
};

describe("learning", () => {
  it("a shortened default run drives the loss well under ln(vocab) and the recall accuracy above chance", async () => {
    const outDir = fs.mkdtempSync(path.join(os.tmpdir(), "learn-"));
    const { metrics } = await runTraining({ config, outDir, resumeFile: null, startPool: () => InProcessPool.local(config, null), log: () => undefined });
    const last = metrics.slice(-20);
    const loss = last.reduce((a, m) => a + m.loss, 0) / last.length;
    const accuracy = last.reduce((a, m) => a + m.accuracy!, 0) / last.length;
    const chance = 1 / (config.vocab / 4);
    expect(metrics[0]!.loss).toBeGreaterThan(0.9 * Math.log(config.vocab));
    expect(loss).toBeLessThan(0.65 * Math.log(config.vocab));
    expect(accuracy).toBeGreaterThan(2 * chance);
  });
});
