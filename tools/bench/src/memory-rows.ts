/**
 * `pnpm bench:memory`' rows: the trainer configuration each row runs (the
 * same object its memory account is computed from), the command line that
 * runs it, the runs themselves (alternated in pairs for the speed rows) and
 * what each measured.
 */
import { execFile } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { DEFAULTS, estimateMemory, type MemoryEstimate, type TrainConfig } from "@ulysses/trainer/memory";
import { median } from "@ulysses/measure";

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
export const CLI = path.join(REPO_ROOT, "apps/trainer/src/cli.ts");
export const KiB = 1024;
export const MiB = 1024 * KiB;

export type Mode = "plain" | "default" | "lean";
export const MODES: readonly Mode[] = ["plain", "default", "lean"];

export interface RowSpec {
  group: "memory" | "vocab" | "speed" | "long";
  sp: 1 | 2;
  mode: Mode;
  seq: number;
  task: "text" | "recall";
  vocab: number;
  steps: number;
  /** Its first steps, not timed (at most steps - 1). */
  untimed: number;
}

export interface RowResult extends RowSpec {
  /** The median of the runs' peaks. */
  peakBytes: number;
  /** Every run's peak RSS, in run order. */
  peaks: number[];
  /** The median of the runs' tokens/s. */
  tokensPerSec: number;
  /** Every run's tokens/s (its median over the timed steps), in run order. */
  speeds: number[];
  mfu: number;
  /** Every run's MatMul rate (FLOP/s, the MFU's denominator, measured once at the trainer's start-up), in run order. */
  rates: number[];
  stepMs: number;
  /** The first run's. */
  wallSeconds: number;
  estimate: MemoryEstimate;
  command: string;
}

/** Per pair of speed runs next to each other in time (runSpeedPair's order), SP 1's tokens/s over SP 2's. */
export const pairRatios = (sp1: RowResult, sp2: RowResult): number[] => sp1.speeds.map((s, i) => s / sp2.speeds[i]!);

/** The trainer configuration a row runs (the same object the account is computed from). */
export function rowConfig(row: RowSpec, dataFile: string, outDir: string): TrainConfig {
  const lean = row.mode === "lean";
  const plain = row.mode === "plain";
  return {
    ...DEFAULTS,
    sp: row.sp,
    backend: row.sp === 1 ? "local" : "threads",
    threads: row.sp === 1 ? 2 : 1,
    task: row.task,
    data: row.task === "text" ? dataFile : null,
    vocab: row.task === "text" ? null : row.vocab,
    tiedHead: false,
    seq: row.seq,
    layers: 2,
    hidden: 256,
    heads: 8,
    kvHeads: 8,
    batch: 1,
    steps: row.steps,
    warmup: 1,
    activationCheckpointing: lean,
    tileAttention: lean ? "auto" : 1,
    // memory rows measure the least-memory allocation; speed rows run the trainer's default (auto: arenas, on this machine)
    memoryArena: row.group === "speed" ? "auto" : false,
    tileMlp: plain ? 0 : "auto",
    tileLoss: plain ? 0 : "auto",
    out: outDir,
    overwrite: true,
    checkpointEvery: 0,
    export: false,
    logEvery: 1000000,
    skipMemoryCheck: true,
  };
}

export function cliArgs(c: TrainConfig): string[] {
  const args = [
    "--sp",
    String(c.sp),
    "--backend",
    c.backend,
    "--threads",
    String(c.threads),
    "--seq",
    String(c.seq),
    "--layers",
    String(c.layers),
    "--hidden",
    String(c.hidden),
    "--heads",
    String(c.heads),
    "--kv-heads",
    String(c.kvHeads),
    "--batch",
    String(c.batch),
    "--steps",
    String(c.steps),
    "--warmup",
    String(c.warmup),
    "--out",
    c.out!,
    "--overwrite",
    "--checkpoint-every",
    "0",
    "--no-export",
    "--log-every",
    String(c.logEvery),
    "--skip-memory-check",
    "--tile-mlp",
    String(c.tileMlp),
    "--tile-loss",
    String(c.tileLoss),
    "--tile-attention",
    String(c.tileAttention),
    "--no-tied-head",
  ]; // prettier-ignore
  if (c.task === "text") args.push("--data", c.data!);
  else args.push("--task", "recall", "--vocab", String(c.vocab));
  if (c.activationCheckpointing) args.push("--activation-checkpointing");
  if (c.memoryArena === false) args.push("--no-memory-arena");
  return args;
}

export interface RunMetrics {
  tokensPerSec: number;
  mfu: number;
  matmulRate: number;
  stepMs: number;
  peakRssBytes: number;
}

/** A row's trainer command: its directory, its configuration and the CLI's arguments. */
export function rowCommand(row: RowSpec, dataFile: string, outRoot: string): { dir: string; config: TrainConfig; args: string[] } {
  const dir = path.join(outRoot, "runs", `${row.group}-sp${row.sp}-${row.mode}-${row.task}${row.vocab}-n${row.seq}`);
  const config = rowConfig(row, dataFile, dir);
  return { dir, config, args: cliArgs(config) };
}

/**
 * A row's result from its runs (each run's metrics, in run order): its peak is the median of the runs' peaks, its
 * speed (tokens/s, MFU, step time) the median of the runs' medians over the steps after the row's untimed ones.
 */
export function rowResult(
  row: RowSpec,
  command: { dir: string; config: TrainConfig; args: string[] },
  all: RunMetrics[][],
  wallSeconds: number,
  dataFile: string,
): RowResult {
  const timed = all.map((steps) => steps.slice(row.untimed));
  const speed = (pick: (m: RunMetrics) => number) => median(timed.map((steps) => median(steps.map(pick))));
  return {
    ...row,
    peakBytes: median(all.map((steps) => Math.max(...steps.map((m) => m.peakRssBytes)))),
    peaks: all.map((steps) => Math.max(...steps.map((m) => m.peakRssBytes))),
    tokensPerSec: speed((m) => m.tokensPerSec),
    speeds: timed.map((steps) => median(steps.map((m) => m.tokensPerSec))),
    mfu: speed((m) => m.mfu),
    rates: all.map((steps) => steps[0]!.matmulRate),
    stepMs: speed((m) => m.stepMs),
    wallSeconds,
    estimate: estimateMemory(command.config),
    command: `pnpm train ${command.args.join(" ").replaceAll(command.dir, "<out>").replaceAll(dataFile, "<text>")}`,
  };
}

/** Runs a row `runs` times, each in its own trainer process. */
export async function runRow(row: RowSpec, runs: number, dataFile: string, outRoot: string): Promise<RowResult> {
  const command = rowCommand(row, dataFile, outRoot);
  const started = performance.now();
  const all: RunMetrics[][] = [await runTrainer(command.args, command.dir)];
  const wallSeconds = (performance.now() - started) / 1000;
  for (let i = 1; i < runs; i++) all.push(await runTrainer(command.args, command.dir));
  return rowResult(row, command, all, wallSeconds, dataFile);
}

/**
 * Runs the SP 1 and SP 2 rows of one N `runs` times each, alternating (SP 1 then SP 2, then SP 2 then SP 1, ...), so
 * that each SP 1 run has an SP 2 run next to it in time: this VM's speed drifts by 20-30% over minutes (its two
 * cores are not always equally fast), which separate blocks of runs would read as a difference between SP 1 and SP 2.
 * Returns both rows, their runs' speeds in pair order.
 */
export async function runSpeedPair(rows: readonly [RowSpec, RowSpec], runs: number, dataFile: string, outRoot: string): Promise<[RowResult, RowResult]> {
  const commands = rows.map((row) => rowCommand(row, dataFile, outRoot));
  const all: RunMetrics[][][] = [[], []];
  const walls = [0, 0];
  for (let i = 0; i < runs; i++) {
    for (const k of i % 2 === 0 ? [0, 1] : [1, 0]) {
      const started = performance.now();
      all[k]!.push(await runTrainer(commands[k]!.args, commands[k]!.dir));
      if (i === 0) walls[k] = (performance.now() - started) / 1000;
    }
  }
  return rows.map((row, k) => rowResult(row, commands[k]!, all[k]!, walls[k]!, dataFile)) as [RowResult, RowResult];
}

/** One trainer process with `args` (writing to `dir`): its metrics.jsonl, a line a step; `bench` names the benchmark in a failure. */
export async function runTrainer(args: string[], dir: string, bench = "bench:memory"): Promise<RunMetrics[]> {
  try {
    await promisify(execFile)(process.execPath, ["--conditions=@ulysses/source", "--import", "tsx", CLI, ...args], {
      cwd: REPO_ROOT,
      env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" },
      maxBuffer: 16 << 20,
    });
  } catch (cause) {
    const e = cause as { stderr?: string; stdout?: string; message: string };
    throw new Error(`${bench}: the trainer failed for ${path.basename(dir)}: ${e.message}\n${e.stderr ?? ""}${e.stdout?.slice(-2000) ?? ""}`, { cause });
  }
  return fs
    .readFileSync(path.join(dir, "metrics.jsonl"), "utf8")
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as RunMetrics);
}

/** Byte-level text for the rows: this repository's Markdown, concatenated (read at run time, nothing downloaded). */
export function writeText(file: string): void {
  const parts: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      if (entry.name === "node_modules" || entry.name.startsWith(".") || entry.name === "dist" || entry.name === "bench-results") continue;
      const p = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(p);
      else if (entry.name.endsWith(".md")) parts.push(fs.readFileSync(p, "utf8"));
    }
  };
  for (const top of ["docs", "packages", "apps", "tools", "contributing"]) if (fs.existsSync(path.join(REPO_ROOT, top))) walk(path.join(REPO_ROOT, top));
  const text = parts.join("\n\n");
  // enough bytes for a few steps of the longest row without the data wrapping around many times
  fs.writeFileSync(file, text.repeat(Math.max(1, Math.ceil((4 * MiB) / Math.max(1, text.length)))));
}
