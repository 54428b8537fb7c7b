/**
 * Training on packed documents: 50 steps at SP 2 on a JSONL corpus of 200
 * documents of mixed lengths (generated here: short sentences built from a
 * small vocabulary of words, so there is something to learn). The loss
 * falls, every step reports its documents and padding, and its MFU counts
 * the pairs the document masks attend, not the rows' whole causal triangles.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { matmulFlopsPerToken } from "@ulysses/measure";
import { DEFAULTS, gptConfigOf, type TrainConfig } from "./config.js";
import { gptDimensionsOf } from "./flops.js";
import { RankPool } from "./rank-pool.js";
import { runTraining } from "./run.js";

function corpus(dir: string): string {
  const words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "its", "home"];
  let seed = 7;
  const random = () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  const lines: string[] = [];
  for (let d = 0; d < 200; d++) {
    const length = 2 + Math.floor(random() * 12);
    lines.push(JSON.stringify({ text: `${Array.from({ length }, () => words[Math.floor(random() * words.length)]).join(" ")}.` }));
  }
  const file = path.join(dir, "corpus.jsonl");
  fs.writeFileSync(file, `${lines.join("\n")}\n`);
  return file;
}

describe("packed documents", () => {
  it("50 steps at SP 2 on a JSONL corpus of 200 mixed-length documents: the loss falls", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "docs-train-"));
    const config: TrainConfig = {
      ...DEFAULTS,
      backend: "local",
      task: "text",
      data: corpus(dir),
      sp: 2,
      seq: 128,
      hidden: 32,
      heads: 2,
      kvHeads: 2,
      layers: 2,
      batch: 4,
      steps: 50,
      warmup: 5,
      lr: 5e-3,
      checkpointEvery: 0,
      export: false,
      threads: 1,
    };
    const outDir = path.join(dir, "run");
    const { metrics } = await runTraining({
      config,
      outDir,
      resumeFile: null,
      startPool: () => RankPool.start({ ...config, backend: "local" }, null),
      log: () => undefined,
    });
    expect(metrics).toHaveLength(50);
    const mean = (rows: typeof metrics) => rows.reduce((a, m) => a + m.loss, 0) / rows.length;
    expect(mean(metrics.slice(0, 5))).toBeGreaterThan(0.8 * Math.log(256));
    expect(mean(metrics.slice(-10))).toBeLessThan(0.7 * mean(metrics.slice(0, 5)));
    // the MFU counts the pairs the document masks attend: with documents of at most 65 bytes (13 words of at most 4 letters,
    // spaces and a full stop), a row's attention covers at most seq x 66 / 2 pairs per head, far under its causal 128 x 129 / 2
    const dims = gptDimensionsOf(gptConfigOf(config));
    const tokens = config.batch * config.seq;
    const matrices = 3 * tokens * matmulFlopsPerToken(dims);
    const perPair = 3 * 4 * config.layers * config.hidden;
    for (const m of metrics) {
      const flops = (m.mfu * m.matmulRate! * m.stepMs) / 1000;
      expect(flops).toBeGreaterThan(matrices + perPair * tokens);
      expect(flops).toBeLessThanOrEqual((matrices + (perPair * tokens * 66) / 2) * (1 + 1e-9));
    }
    for (const m of metrics) {
      const row = m as unknown as { documents?: number; padding?: number };
      // 4 rows of 128 tokens hold several documents of 2 to 13 words (about 10 to 70 bytes) each
      expect(row.documents).toBeGreaterThan(4);
      expect(row.padding).toBeGreaterThanOrEqual(0);
      expect(row.padding).toBeLessThan(0.5);
    }
  });
});
