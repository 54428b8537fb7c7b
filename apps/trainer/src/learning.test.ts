import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { DEFAULTS, type TrainConfig } from "./config.js";
import { RankPool } from "./rank-pool.js";
import { runTraining } from "./run.js";

// A shortened default run: the default task and architecture (SP 2, long-range
// recall, 2 layers, tied head, causal Ulysses attention), scaled down in
// width, length, keys and steps so it takes seconds. At seq 64 the facts are
// tokens [0, 16) on rank 0 and the queries [48, 64) on rank 1, every answer at
// least 33 tokens back; without rank 0's shard no model beats 1 / values =
// 12.5% (the values are drawn uniformly, and none appears on rank 1).
const config: TrainConfig = {
  ...DEFAULTS,
  backend: "local",
  seq: 64,
  hidden: 32,
  batch: 8,
  keys: 4,
  values: 8,
  steps: 150,
  warmup: 10,
  lr: 5e-3,
  checkpointEvery: 0,
  export: false,
  threads: 1,
};

describe("learning", () => {
  it("a shortened default run retrieves the answers from the other rank's shard, far above the best without it", async () => {
    const outDir = fs.mkdtempSync(path.join(os.tmpdir(), "learn-"));
    const lines: string[] = [];
    const { metrics } = await runTraining({
      config,
      outDir,
      resumeFile: null,
      startPool: () => RankPool.start({ ...config, backend: "local" }, null),
      log: (line) => lines.push(line),
    });
    const header = lines.find((l) => l.startsWith("task: recall"));
    expect(header).toMatch(
      /facts at tokens \[0, 16\) on rank 0, queries at \[48, 64\) on rank 1 \(no rank holds both\); every answer is at least 33 tokens back/,
    );
    expect(header).toMatch(/chance 3\.1%, best without the facts' rank 12\.5%/);
    const last = metrics.slice(-30);
    const accuracy = last.reduce((a, m) => a + m.accuracy!, 0) / last.length;
    const withoutFacts = 1 / config.values;
    // vocab 4 x 9 + 1 = 37: the first loss is about ln 37
    expect(metrics[0]!.loss).toBeGreaterThan(0.9 * Math.log(37));
    expect(last.reduce((a, m) => a + m.loss, 0) / last.length).toBeLessThan(0.5 * Math.log(37));
    expect(accuracy).toBeGreaterThan(5 * withoutFacts);
  });
});
