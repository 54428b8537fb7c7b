import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { readSafetensors } from "@ulysses/model";
import { DEFAULTS, type TrainConfig } from "./config.js";
import { InProcessPool } from "./rank-pool.js";
import { runTraining } from "./run.js";

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
  pairs: 2,
  queries: 2,
  threads: 1,
};

async function train(overrides: Partial<TrainConfig>) {
  const config = { ...base, ...overrides };
  const outDir = fs.mkdtempSync(path.join(os.tmpdir(), "dp-"));
  const result = await runTraining({ config, outDir, resumeFile: null, startPool: () => InProcessPool.local(config, null), log: () => undefined });
  return { losses: result.metrics.map((m) => m.loss), weights: readSafetensors(result.checkpoint).tensors };
}

function expectClose(a: Awaited<ReturnType<typeof train>>, b: Awaited<ReturnType<typeof train>>): void {
  a.losses.forEach((loss, step) => expect(Math.abs(b.losses[step]! - loss) / loss, `step ${step}`).toBeLessThanOrEqual(1e-4));
  for (const [name, t] of a.weights) {
    if (name.startsWith("optimizer")) continue;
    const other = b.weights.get(name)!.data as Float32Array;
    let worst = 0;
    let scale = 1e-12;
    (t.data as Float32Array).forEach((v, i) => {
      worst = Math.max(worst, Math.abs(v - other[i]!));
      scale = Math.max(scale, Math.abs(v));
    });
    expect(worst / scale, name).toBeLessThanOrEqual(1e-4);
  }
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

  it("sp 2 x dp 2 (batch 2 per group) and ZeRO-1 over the 4 ranks train like one rank with the global batch of 4", async () => {
    const single = await train({ sp: 1, dp: 1, batch: 4 });
    expectClose(single, await train({ sp: 2, dp: 2, batch: 2, zero1: true }));
  });
});
