/**
 * Fine-tuning a Hugging Face-shaped model through the trainer: a qwen3 config
 * (head width of its own, q/k norms, GQA, tied head, the config's vocabulary
 * of 151,936 rows, so the loss is tiled) started from a config.json with the
 * real Qwen3 tokenizer, on chat data packed into documents with the loss on
 * the assistant's tokens. Ulysses at SP 2 and 4, ring at SP 4 (zigzag) and
 * hybrid 2 x 2 train like one rank for 10 steps: every loss, every step's
 * gradient and every final weight within 1e-5 (relative), on the local backend
 * (all ranks in this thread, the same ranks' code as threads and MPI; a rank
 * hook reads world rank 0's reduced gradient after each step); one run on
 * worker threads too (losses and weights).
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { readSafetensors } from "@ulysses/model";
import { DEFAULTS, type TrainConfig } from "./config.js";
import { RankPool } from "./rank-pool.js";
import { installRankHooks } from "./rank-trainer.js";
import { runTraining } from "./run.js";
import { expectRunsClose, type RunOutcome } from "./testing-fixtures/compare-runs.js";
import { QWEN3_TOKENIZER_DIR, QWEN3_VOCAB, writeChat } from "./testing-fixtures/tiny-hf.js";

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
const chat = writeChat(path.join(root, "chat.jsonl"), 30, (i) => [`Name a number after ${i}.`, `${i + 1} comes after ${i}.`]);

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

// world rank 0's gradient after each step (all-reduced and clipped: the one the optimizer applied), for runs on this thread
let gradients: Float32Array[] = [];
installRankHooks({ stepEnd: (rank, _step, trainer) => rank === 0 && gradients.push(trainer.model.params.grads.slice()) });

async function train(overrides: Partial<TrainConfig>) {
  const config = { ...base, ...overrides };
  const outDir = fs.mkdtempSync(path.join(root, "run-"));
  gradients = [];
  const result = await runTraining({ config, outDir, resumeFile: null, startPool: () => RankPool.start(config, null), log: () => undefined });
  return { losses: result.metrics.map((m) => m.loss), weights: readSafetensors(result.checkpoint).tensors, gradients };
}

function expectClose(a: RunOutcome & { gradients: Float32Array[] }, b: RunOutcome & { gradients: Float32Array[] }, what: string): void {
  expectRunsClose(a, b, { tolerance: 1e-5, what });
  // each step's whole gradient vector: ||b - a|| / ||a|| (float32 sums in another order leave its tiniest elements noisier)
  if (b.gradients.length === 0) return;
  expect(b.gradients.length, what).toBe(a.gradients.length);
  a.gradients.forEach((g, step) => {
    let diff = 0;
    let norm = 0;
    g.forEach((x, i) => {
      diff += (b.gradients[step]![i]! - x) ** 2;
      norm += x * x;
    });
    expect(Math.sqrt(diff / norm), `${what}: gradient of step ${step + 1}`).toBeLessThanOrEqual(1e-5);
  });
}

describe("fine-tuning a qwen3-shaped model with the real tokenizer on chat data", () => {
  it("Ulysses SP 2 and 4, ring SP 4 and hybrid 2 x 2 equal one rank over 10 steps (losses, every step's gradients and weights within 1e-5)", async () => {
    const single = await train({ sp: 1 });
    expect(single.losses[9]!).toBeLessThan(single.losses[0]!);
    expect(single.gradients).toHaveLength(10);
    expect(single.gradients[0]!.some((g) => g !== 0)).toBe(true);
    for (const run of [{ sp: 2 }, { sp: 4 }, { sp: 4, attention: "ring" as const }, { sp: 4, attention: "hybrid" as const, ulyssesDegree: 2 }])
      expectClose(single, await train(run), JSON.stringify(run));
    // the same ranks as worker threads (their hooks live in the workers: no gradients here)
    const threads = await train({ sp: 2, backend: "threads" });
    expect(threads.gradients).toHaveLength(0);
    expectClose(single, threads, "threads sp 2");
  }, 600_000);
});
