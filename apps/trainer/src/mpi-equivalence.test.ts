/**
 * The MPI backend trains exactly like the threads backend: the same flags
 * under `mpirun -np 2 ... --backend mpi` give the same loss curve (to 1e-5
 * relative) as the default worker-threads run, and so do ring attention
 * with ZeRO-2 (np 2), hybrid Ulysses x ring attention with ZeRO-3 (np 4) and a qwen3-shaped Hugging
 * Face model with the real tokenizer on chat data (np 2). Skipped, outside CI, where
 * OpenMPI is not installed or the MPI addon is not built or does not load (the
 * note printed says what to install or which command builds it); in CI (which
 * installs OpenMPI) that is an error instead.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { mpirunCommand, mpiTestSkipNote, SOURCE_CONDITION_ARG } from "@ulysses/collectives-mpi";
import { lossCurve, spawnTrainer } from "./testing-fixtures/cli.js";
import { QWEN3_TOKENIZER_DIR, QWEN3_VOCAB, writeChat } from "./testing-fixtures/tiny-hf.js";

const flags = [
  "--seq",
  "32",
  "--hidden",
  "16",
  "--heads",
  "2",
  "--kv-heads",
  "2",
  "--layers",
  "2",
  "--batch",
  "2",
  "--keys",
  "3",
  "--values",
  "4",
  "--threads",
  "1",
  "--sp",
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
];

async function run(command: string, args: string[]): Promise<{ code: number | null; output: string }> {
  const { code, stdout, stderr } = await spawnTrainer(args, { command });
  return { code, output: stdout + stderr };
}

/** Every run directory of this file, removed when it ends. */
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "mpi-equivalence-"));
afterAll(() => fs.rmSync(scratch, { recursive: true, force: true }));

const skipNote = mpiTestSkipNote();
if (skipNote) console.warn(`threads vs mpi backend tests ${skipNote}`);

/** Loss curves of the flags on the threads backend, and under mpirun -np `np` with `mpiFlags` added (a later flag wins). */
async function threadsAndMpi(mpiFlags: string[], np = 2, base = flags): Promise<{ threads: number[]; mpi: number[]; mpiOutput: string }> {
  const node = ["--conditions=@ulysses/source", "--import", "tsx", "src/cli.ts"];
  const threadsDir = fs.mkdtempSync(path.join(scratch, "threads-"));
  const mpiDir = fs.mkdtempSync(path.join(scratch, "mpi-"));
  const threads = await run(process.execPath, [...node, ...base, "--out", threadsDir]);
  expect(threads.code, threads.output).toBe(0);
  const [mpirun, ...mpirunArgs] = mpirunCommand({
    np,
    node: process.execPath,
    entry: "src/cli.ts",
    args: ["--backend", "mpi", ...base, ...mpiFlags, "--out", mpiDir],
    typescript: true,
    nodeArgs: [SOURCE_CONDITION_ARG],
  });
  const mpi = await run(mpirun, mpirunArgs);
  expect(mpi.code, mpi.output).toBe(0);
  return { threads: lossCurve(threadsDir), mpi: lossCurve(mpiDir), mpiOutput: mpi.output };
}

function expectSameCurve(a: number[], b: number[], what: string): void {
  expect(b.length).toBe(6);
  expect(a.length).toBe(6);
  for (let i = 0; i < a.length; i++) expect(Math.abs(b[i]! - a[i]!) / Math.abs(a[i]!), `step ${i}: ${what} ${a[i]} vs ${b[i]}`).toBeLessThanOrEqual(1e-5);
  // The curve moved: equal losses are not the trivial case of no training.
  expect(a[5]).not.toBe(a[0]);
}

/** A qwen3-shaped model from a config.json with the real Qwen3 tokenizer, on chat data (the loss on the assistant's tokens). */
function hfFlags(): string[] {
  const dir = fs.mkdtempSync(path.join(scratch, "mpi-hf-"));
  const config = path.join(dir, "qwen3.json");
  fs.writeFileSync(
    config,
    JSON.stringify({
      model_type: "qwen3",
      vocab_size: QWEN3_VOCAB,
      hidden_size: 16,
      intermediate_size: 24,
      num_hidden_layers: 2,
      num_attention_heads: 2,
      num_key_value_heads: 2,
      head_dim: 8,
      max_position_embeddings: 256,
      tie_word_embeddings: true,
    }),
  );
  const chat = writeChat(path.join(dir, "chat.jsonl"), 20, (i) => [`After ${i}?`, `${i + 1}.`]);
  const shape = new Set(["--hidden", "--heads", "--kv-heads", "--layers", "--keys", "--values"]);
  const kept = flags.filter((flag, i) => !shape.has(flag) && !shape.has(flags[i - 1]!));
  return [...kept, "--model-config", config, "--tokenizer", QWEN3_TOKENIZER_DIR, "--data", chat, "--data-format", "chat", "--seq", "64", "--batch", "1"];
}

describe.skipIf(skipNote !== null)(`threads vs mpi backend${skipNote ? ` (${skipNote})` : ""}`, () => {
  it("a qwen3-shaped Hugging Face model with its real tokenizer on chat data: mpirun -np 2 gives the threads backend's loss curve to 1e-5", async () => {
    const { threads, mpi, mpiOutput } = await threadsAndMpi([], 2, hfFlags());
    expect(mpiOutput).toMatch(/on mpi, text task, seq 64, batch 1, qwen3 model of/);
    expectSameCurve(threads, mpi, "threads vs mpi (qwen3, chat)");
  }, 240_000);

  it("the same flags give the same loss curve to 1e-5 relative", async () => {
    const { threads, mpi, mpiOutput } = await threadsAndMpi([]);
    expect(mpiOutput).toMatch(/on mpi/);
    expectSameCurve(threads, mpi, "threads vs mpi");
  }, 180_000);

  it("ring attention with ZeRO-2 under mpirun (its send/recv around the ranks, gradients reduce-scattered as the backward makes them) gives the threads backend's Ulysses ZeRO-0 loss curve to 1e-5", async () => {
    const { threads, mpi, mpiOutput } = await threadsAndMpi(["--attention", "ring", "--zero", "2"]);
    expect(mpiOutput).toMatch(/on mpi.*ring attention/);
    expect(mpiOutput).toMatch(/ZeRO-2 over 2 ranks/);
    expectSameCurve(threads, mpi, "threads ulysses vs mpi ring");
  }, 180_000);

  it("hybrid Ulysses 2 x ring 2 with ZeRO-3 under mpirun -np 4 (its subgroups' all-to-all and send/recv, each layer's weights gathered from the four ranks' slices) gives the threads backend's SP 2 Ulysses ZeRO-0 loss curve to 1e-5", async () => {
    const { threads, mpi, mpiOutput } = await threadsAndMpi(["--sp", "4", "--attention", "hybrid", "--ulysses-degree", "2", "--zero", "3"], 4);
    expect(mpiOutput).toMatch(/ZeRO-3 over 4 ranks \(weights, gradients and AdamW moments sharded\)/);
    expect(mpiOutput).toMatch(/sp 4 x dp 1 on mpi.*hybrid attention \(Ulysses 2 x ring 2, zigzag layout\)/);
    expectSameCurve(threads, mpi, "threads ulysses vs mpi hybrid");
  }, 240_000);
});
