/**
 * Fine-tuning a Hugging Face-shaped model through the trainer: a qwen3 config
 * (head width of its own, q/k norms, GQA, tied head, the config's vocabulary
 * of 151,936 rows, so the loss is tiled) started from a config.json with the
 * real Qwen3 tokenizer, on chat data packed into documents with the loss on
 * the assistant's tokens. Ulysses at SP 2 and 4, ring at SP 4 (zigzag) and
 * hybrid 2 x 2 train like one rank for 10 steps: every loss and every final
 * weight within 1e-5 (relative), on the local backend (all ranks in this
 * thread, the same ranks' code as threads and MPI); one run on worker threads
 * too.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { readSafetensors } from "@ulysses/model";
import { DEFAULTS, type TrainConfig } from "./config.js";
import { RankPool } from "./rank-pool.js";
import { runTraining } from "./run.js";
import { expectRunsClose, type RunOutcome } from "./testing-fixtures/compare-runs.js";
import { QWEN3_TOKENIZER_DIR, QWEN3_VOCAB } from "./testing-fixtures/tiny-hf.js";

process.env.ORT_DISABLE_TELEMETRY = "1";
const root = fs.mkdtempSync(path.join(os.tmpdir(), "ulysses-hf-eq-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

const configFile = path.join(root, "qwen3.json");
fs.writeFileSync(
  configFile,
  JSON.stringify({
    model_type: "qwen3",
    vocab_size: QWEN3_VOCAB,
    hidden_size: 24,
    intermediate_size: 40,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 8,
    max_position_embeddings: 512,
    rms_norm_eps: 1e-6,
    rope_theta: 1000000,
    tie_word_embeddings: true,
    hidden_act: "silu",
  }),
);
const chat = path.join(root, "chat.jsonl");
fs.writeFileSync(
  chat,
  Array.from({ length: 30 }, (_, i) =>
    JSON.stringify({
      messages: [
        { role: "user", content: `Name a number after ${i}.` },
        { role: "assistant", content: `${i + 1} comes after ${i}.` },
      ],
    }),
  ).join("\n"),
);

const base: TrainConfig = {
  ...DEFAULTS,
  modelConfig: configFile,
  tokenizer: QWEN3_TOKENIZER_DIR,
  task: "text",
  data: chat,
  dataFormat: "chat",
  backend: "local",
  seq: 96,
  steps: 10,
  warmup: 2,
  lr: 1e-2,
  checkpointEvery: 0,
  export: false,
  threads: 1,
};

async function train(overrides: Partial<TrainConfig>) {
  const config = { ...base, ...overrides };
  const outDir = fs.mkdtempSync(path.join(root, "run-"));
  const result = await runTraining({ config, outDir, resumeFile: null, startPool: () => RankPool.start(config, null), log: () => undefined });
  return { losses: result.metrics.map((m) => m.loss), weights: readSafetensors(result.checkpoint).tensors };
}

function expectClose(a: RunOutcome, b: RunOutcome, what: string): void {
  expectRunsClose(a, b, { tolerance: 1e-5, what });
}

describe("fine-tuning a qwen3-shaped model with the real tokenizer on chat data", () => {
  it("Ulysses SP 2 and 4, ring SP 4 and hybrid 2 x 2 equal one rank over 10 steps (losses and weights within 1e-5)", async () => {
    const single = await train({ sp: 1 });
    expect(single.losses[9]!).toBeLessThan(single.losses[0]!);
    for (const run of [{ sp: 2 }, { sp: 4 }, { sp: 4, attention: "ring" as const }, { sp: 4, attention: "hybrid" as const, ulyssesDegree: 2 }])
      expectClose(single, await train(run), JSON.stringify(run));
    // the same ranks as worker threads
    expectClose(single, await train({ sp: 2, backend: "threads" }), "threads sp 2");
  }, 600_000);
});
