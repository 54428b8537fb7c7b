/**
 * `pnpm bench:memory` (issue 16): peak resident memory and speed of the
 * trainer CLI, each row in its own process (its own ONNX Runtime and peak
 * RSS), on the issue's model (2 layers, hidden 256, 8 heads, batch 1, fp32,
 * byte-level text written from this repository's Markdown), measured in one
 * run:
 *
 *   - memory rows: SP 1 (2 ONNX Runtime threads, local backend) and SP 2
 *     (threads backend, 1 thread per rank), plain (every tiling off, for
 *     reference), default (the trainer's defaults: MLP and loss tiled where a
 *     rank's untiled buffer would pass 4 MiB) and lean (default + activation
 *     checkpointing + attention in head groups, `--tile-attention auto`), at
 *     N = 8K and 16K, each run --repeat times (its peak: the median); the
 *     slope of peak RSS per token between them;
 *   - vocabulary rows: the recall task at vocab 256 and 32768, SP 2, default
 *     (the loss tiled), at 8K and 32K (repeated too): the slope with tiled loss
 *     must not grow with the vocabulary. Default rather than lean, and 8K to
 *     32K rather than to 16K, so the peaks differ by hundreds of MiB: a lean
 *     slope of a few KiB per token over 8K tokens is about 30 MiB, which the
 *     10-40 MiB spread of identical runs swamps;
 *   - speed rows: SP 1 and SP 2, default, at 4K, 8K and 16K, each run
 *     --speed-repeat times, SP 1's and SP 2's runs alternated so that each
 *     pair ran next to each other in time: tokens/s (median over the runs of
 *     each run's median over the steps after --speed-warmup untimed ones) and
 *     MFU against the same process's ONNX Runtime MatMul rate, and SP 1 as a
 *     fraction of SP 2 (the median over the pairs of their ratio);
 *   - with --long: one step at N = 131072, SP 2, lean.
 *
 * Every row is also predicted by the trainer's memory account
 * (`estimateMemory`, the preflight's estimate), printed term by term next to
 * the measured peak. Writes bench-results/memory/memory.json and memory.md;
 * the issue's targets are printed as PASS/FAIL lines and do not change the
 * exit status. `--help` lists the flags; a bad flag or value exits 2.
 */
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { DEFAULTS, estimateMemory, type MemoryEstimate, type TrainConfig } from "@ulysses/trainer/memory";
import { median } from "@ulysses/measure";
import { parseFlags, positiveIntegers, readCommandLine, UsageError } from "./cli-flags.js";
import { describeMachine, machineInfo } from "./paper/machine-info.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const CLI = path.join(REPO_ROOT, "apps/trainer/src/cli.ts");
const KiB = 1024;
const MiB = 1024 * KiB;

const HELP = `Usage: pnpm bench:memory [flags]

Peak RSS and speed of the trainer (2 layers, hidden 256, 8 heads, batch 1,
byte-level text) at SP 1 and SP 2, plain (every tiling off), default (the
trainer's defaults: --tile-mlp auto --tile-loss auto) and lean (default +
--activation-checkpointing --tile-attention auto); slopes per token, the
vocabulary rows (recall task, default, vocab 256 vs 32768), MFU, and the memory account
against every measured peak. Writes bench-results/memory/memory.json and
memory.md.

  --memory-seq LIST   the two sequence lengths of the memory rows' slopes (default 8192,16384)
  --vocab-seq LIST    the two sequence lengths of the vocabulary rows' slopes (default 8192,32768)
  --speed-seq LIST    sequence lengths of the speed rows (default 4096,8192,16384)
  --speed-steps N     steps of a speed row (default 10)
  --speed-warmup N    its first steps, not timed (default 5: step 1 builds every graph, step 2
                      creates the addon's sessions, and the heap and buffer pools grow through
                      about step 6)
  --repeat N          runs of each memory and vocabulary row; its peak is their median (default 3)
  --speed-repeat N    runs of each speed row, SP 1's and SP 2's alternated; tokens/s and MFU are
                      the medians of a row's runs, SP 1 / SP 2 the median of the pairs' ratios
                      (default 5)
  --rows LIST         which groups of rows to run: memory, vocab, speed (default all three);
                      the targets of the groups left out are not checked
  --long              also one lean step at N = 131072, SP 2 (minutes)
  --help, -h          this text
`;

const FLAG_OPTIONS = {
  "memory-seq": { type: "string" },
  "vocab-seq": { type: "string" },
  "speed-seq": { type: "string" },
  "speed-steps": { type: "string" },
  "speed-warmup": { type: "string" },
  repeat: { type: "string" },
  "speed-repeat": { type: "string" },
  rows: { type: "string" },
  long: { type: "boolean" },
} as const;

interface Flags {
  memorySeq: [number, number];
  vocabSeq: [number, number];
  speedSeq: number[];
  speedSteps: number;
  speedWarmup: number;
  repeat: number;
  speedRepeat: number;
  rows: ReadonlySet<RowGroup>;
  long: boolean;
}

type RowGroup = "memory" | "vocab" | "speed";
const ROW_GROUPS: readonly RowGroup[] = ["memory", "vocab", "speed"];

/** --rows: a comma-separated subset of ROW_GROUPS, each at most once. */
function rowGroups(text: string): ReadonlySet<RowGroup> {
  const names = text.split(",").map((name) => name.trim());
  const unknown = names.filter((name) => !(ROW_GROUPS as readonly string[]).includes(name));
  if (names.length === 0 || unknown.length > 0 || new Set(names).size !== names.length)
    throw new UsageError(`--rows: expected a comma-separated list of ${ROW_GROUPS.join(", ")}, each at most once, got '${text}'`);
  return new Set(names as RowGroup[]);
}

function readFlags(argv: readonly string[]): Flags | null {
  const v = parseFlags("bench:memory", argv, FLAG_OPTIONS);
  if (v === null) return null;
  const pair = (flag: "memory-seq" | "vocab-seq", fallback: string): [number, number] => {
    const lengths = positiveIntegers(`--${flag}`, v[flag] ?? fallback);
    if (lengths.length !== 2 || lengths[0]! >= lengths[1]!) throw new UsageError(`--${flag}: expected two increasing lengths, got '${v[flag]}'`);
    return [lengths[0]!, lengths[1]!];
  };
  const stepsText = v["speed-steps"] ?? "10";
  const speedSteps = positiveIntegers("--speed-steps", stepsText)[0]!;
  const speedWarmup = positiveIntegers("--speed-warmup", v["speed-warmup"] ?? "5")[0]!;
  if (speedSteps <= speedWarmup) throw new UsageError(`--speed-steps: more than --speed-warmup (${speedWarmup}) so that a step is timed, got '${stepsText}'`);
  return {
    memorySeq: pair("memory-seq", "8192,16384"),
    vocabSeq: pair("vocab-seq", "8192,32768"),
    speedSeq: positiveIntegers("--speed-seq", v["speed-seq"] ?? "4096,8192,16384"),
    speedSteps,
    speedWarmup,
    repeat: positiveIntegers("--repeat", v.repeat ?? "3")[0]!,
    speedRepeat: positiveIntegers("--speed-repeat", v["speed-repeat"] ?? "5")[0]!,
    rows: rowGroups(v.rows ?? ROW_GROUPS.join(",")),
    long: v.long ?? false,
  };
}

type Mode = "plain" | "default" | "lean";
const MODES: readonly Mode[] = ["plain", "default", "lean"];

interface RowSpec {
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

interface RowResult extends RowSpec {
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
const pairRatios = (sp1: RowResult, sp2: RowResult): number[] => sp1.speeds.map((s, i) => s / sp2.speeds[i]!);

/** The trainer configuration a row runs (the same object the account is computed from). */
function rowConfig(row: RowSpec, dataFile: string, outDir: string): TrainConfig {
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

function cliArgs(c: TrainConfig): string[] {
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

interface RunMetrics {
  tokensPerSec: number;
  mfu: number;
  matmulRate: number;
  stepMs: number;
  peakRssBytes: number;
}

/** A row's trainer command: its directory, its configuration and the CLI's arguments. */
function rowCommand(row: RowSpec, dataFile: string, outRoot: string): { dir: string; config: TrainConfig; args: string[] } {
  const dir = path.join(outRoot, "runs", `${row.group}-sp${row.sp}-${row.mode}-${row.task}${row.vocab}-n${row.seq}`);
  const config = rowConfig(row, dataFile, dir);
  return { dir, config, args: cliArgs(config) };
}

/**
 * A row's result from its runs (each run's metrics, in run order): its peak is the median of the runs' peaks, its
 * speed (tokens/s, MFU, step time) the median of the runs' medians over the steps after the row's untimed ones.
 */
function rowResult(
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
async function runRow(row: RowSpec, runs: number, dataFile: string, outRoot: string): Promise<RowResult> {
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
async function runSpeedPair(rows: readonly [RowSpec, RowSpec], runs: number, dataFile: string, outRoot: string): Promise<[RowResult, RowResult]> {
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

/** One trainer process with `args` (writing to `dir`): its metrics.jsonl, a line a step. */
async function runTrainer(args: string[], dir: string): Promise<RunMetrics[]> {
  try {
    await promisify(execFile)(process.execPath, ["--conditions=@ulysses/source", "--import", "tsx", CLI, ...args], {
      cwd: REPO_ROOT,
      env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" },
      maxBuffer: 16 << 20,
    });
  } catch (cause) {
    const e = cause as { stderr?: string; stdout?: string; message: string };
    throw new Error(`bench:memory: the trainer failed for ${path.basename(dir)}: ${e.message}\n${e.stderr ?? ""}${e.stdout?.slice(-2000) ?? ""}`, { cause });
  }
  return fs
    .readFileSync(path.join(dir, "metrics.jsonl"), "utf8")
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as RunMetrics);
}

/** Byte-level text for the rows: this repository's Markdown, concatenated (read at run time, nothing downloaded). */
function writeText(file: string): void {
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

const gib = (b: number) => `${(b / 2 ** 30).toFixed(2)} GiB`;
/** FLOP/s rates as GFLOP/s, comma-separated. */
const gflops = (rates: readonly number[]) => rates.map((r) => (r / 1e9).toFixed(0)).join(", ");
const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;
const kibPerToken = (b: number) => `${(b / KiB).toFixed(1)} KiB`;

function slope(rows: RowResult[], a: number, b: number, pick: (r: RowResult) => boolean): number | null {
  const ra = rows.find((r) => pick(r) && r.seq === a);
  const rb = rows.find((r) => pick(r) && r.seq === b);
  return ra && rb ? (rb.peakBytes - ra.peakBytes) / (b - a) : null;
}

async function main(): Promise<void> {
  const f = readCommandLine(HELP, process.argv.slice(2), readFlags);
  const outRoot = path.join(REPO_ROOT, "bench-results", "memory");
  fs.rmSync(path.join(outRoot, "runs"), { recursive: true, force: true });
  fs.mkdirSync(outRoot, { recursive: true });
  const dataFile = path.join(os.tmpdir(), `ulysses-bench-memory-${process.pid}.txt`);
  writeText(dataFile);
  const machine = machineInfo();
  const [n1, n2] = f.memorySeq;
  const [v1, v2] = f.vocabSeq;
  // a speed pair: SP 1 and SP 2 at one N, their runs alternated
  const specs: (RowSpec | [RowSpec, RowSpec])[] = [];
  if (f.rows.has("memory"))
    for (const sp of [1, 2] as const)
      for (const mode of MODES) for (const seq of [n1, n2]) specs.push({ group: "memory", sp, mode, seq, task: "text", vocab: 256, steps: 2, untimed: 1 });
  if (f.rows.has("vocab"))
    for (const vocab of [256, 32768])
      for (const seq of [v1, v2]) specs.push({ group: "vocab", sp: 2, mode: "default", seq, task: "recall", vocab, steps: 2, untimed: 1 });
  if (f.rows.has("speed"))
    for (const seq of f.speedSeq) {
      const row = (sp: 1 | 2): RowSpec => ({ group: "speed", sp, mode: "default", seq, task: "text", vocab: 256, steps: f.speedSteps, untimed: f.speedWarmup });
      specs.push([row(1), row(2)]);
    }
  if (f.long) specs.push({ group: "long", sp: 2, mode: "lean", seq: 131072, task: "text", vocab: 256, steps: 1, untimed: 0 });

  const rows: RowResult[] = [];
  const report = (r: RowResult, ratios?: number[]) => {
    rows.push(r);
    console.log(
      `${r.group.padEnd(6)} SP ${r.sp} ${r.mode.padEnd(5)} ${r.task}${r.task === "recall" ? ` vocab ${r.vocab}` : ""} N=${r.seq}: ` +
        `peak ${gib(r.peakBytes)}${r.peaks.length > 1 ? ` (median of ${r.peaks.map((b) => mib(b)).join(", ")})` : ""} (account ${gib(r.estimate.bytes)}, ${(r.estimate.bytes / r.peakBytes).toFixed(2)}x), ` +
        `${r.tokensPerSec.toFixed(0)} tok/s${r.speeds.length > 1 ? ` (median of ${r.speeds.map((t) => t.toFixed(0)).join(", ")})` : ""}, MFU ${(100 * r.mfu).toFixed(1)}% ` +
        `(MatMul rate ${gflops(r.rates)} GFLOP/s), ${r.wallSeconds.toFixed(0)} s` +
        (ratios ? `; SP 1 / SP 2 by pair of runs ${ratios.map((x) => x.toFixed(2)).join(", ")}` : ""),
    );
  };
  try {
    for (const spec of specs) {
      if (Array.isArray(spec)) {
        const [sp1, sp2] = await runSpeedPair(spec, f.speedRepeat, dataFile, outRoot);
        report(sp1, pairRatios(sp1, sp2));
        report(sp2);
      } else {
        report(await runRow(spec, spec.group === "long" ? 1 : f.repeat, dataFile, outRoot));
      }
    }
  } finally {
    fs.rmSync(dataFile, { force: true });
  }
  machine.loadAfter = os.loadavg();

  const lines: string[] = [];
  const checks: string[] = [];
  const check = (ok: boolean, what: string) => checks.push(`${ok ? "PASS" : "FAIL"} ${what}`);
  lines.push("# bench:memory", "", `Machine: ${describeMachine(machine)}.`, "");
  lines.push(
    `Model: 2 layers, hidden 256, 8 heads / 8 kv heads, GELU MLP x4, batch 1, fp32. LM head untied. Plain = every tiling off (\`--tile-mlp 0 --tile-loss 0\`), for reference; default = the trainer's defaults (\`--tile-mlp auto --tile-loss auto\`: the MLP in tiles of 2048 tokens past 2048 tokens per rank, the loss in tiles of at most 4 MiB of logits, 64 rows at vocab 32768 and 4096 at vocab 256, so untiled up to 4096 tokens per rank); lean = default + \`--activation-checkpointing --tile-attention auto\` (attention in head groups: 8 at SP 1, 4 at SP 2). Memory rows run with \`--no-memory-arena\` (ONNX Runtime arenas off, glibc's mmap threshold fixed: freed buffers go back to the OS; V8 collects freed tensors every 16 MiB of op outputs per rank), ${f.repeat} run${f.repeat > 1 ? "s" : ""} each (the peak is their median); speed rows with the trainer's default allocation (\`--memory-arena auto\`: arenas and glibc's heap when they fit, as here), ${f.speedRepeat} run${f.speedRepeat > 1 ? "s" : ""} each (tokens/s and MFU are their medians; every run's tokens/s is in the speed table).`,
    "",
  );
  lines.push("## Peak RSS", "", "| rows | SP | mode | task | N | peak RSS | runs | account | account / peak |", "|---|---|---|---|---|---|---|---|---|");
  for (const r of rows) {
    lines.push(
      `| ${r.group} | ${r.sp} | ${r.mode} | ${r.task}${r.task === "recall" ? ` (vocab ${r.vocab})` : ""} | ${r.seq} | ${gib(r.peakBytes)} | ${r.peaks.map((b) => mib(b)).join(", ")} | ${gib(r.estimate.bytes)} | ${(r.estimate.bytes / r.peakBytes).toFixed(2)} |`,
    );
  }
  lines.push(
    "",
    "## Slopes of peak RSS per token",
    "",
    `Between N = ${n1} and ${n2}, of the median peaks. The targets: without checkpointing (the default rows) at most 40 KiB, with checkpointing and tiling (lean) at most 10; plain, every tiling off, has none.`,
    "",
    "| SP | mode | slope |",
    "|---|---|---|",
  );
  for (const sp of [1, 2] as const)
    for (const mode of MODES) {
      const s = slope(rows, n1, n2, (r) => r.group === "memory" && r.sp === sp && r.mode === mode);
      if (s === null) continue;
      lines.push(`| ${sp} | ${mode} | ${kibPerToken(s)} |`);
      if (mode === "plain") continue;
      const target = mode === "lean" ? 10 : 40;
      check(s <= target * KiB, `SP ${sp} ${mode}: slope ${kibPerToken(s)}/token <= ${target} KiB`);
    }
  const v256 = slope(rows, v1, v2, (r) => r.group === "vocab" && r.vocab === 256);
  const v32k = slope(rows, v1, v2, (r) => r.group === "vocab" && r.vocab === 32768);
  if (v256 !== null && v32k !== null) {
    lines.push(
      "",
      `Recall task, SP 2, default (loss tiled), N = ${v1} to ${v2}: slope ${kibPerToken(v256)}/token at vocab 256, ${kibPerToken(v32k)}/token at vocab 32768 (${(v32k / v256).toFixed(2)}x).`,
    );
    check(Math.abs(v32k / v256 - 1) <= 0.1, `vocab 32768 slope within 10% of vocab 256 (${(v32k / v256).toFixed(2)}x)`);
  }
  const worst = Math.max(...rows.map((r) => Math.abs(r.estimate.bytes / r.peakBytes - 1)));
  check(worst <= 0.15, `memory account within 15% of the measured peak at every row (worst ${(100 * worst).toFixed(1)}%)`);

  const speed = rows.filter((r) => r.group === "speed");
  if (speed.length > 0) {
    lines.push(
      "",
      "## Speed (default)",
      "",
      `${f.speedSteps} steps a run, the first ${f.speedWarmup} not timed; tokens/s and MFU: the median over the runs of each run's median over its timed steps. ` +
        "SP 1's and SP 2's runs alternate (SP 1 first in odd pairs, SP 2 first in even ones); SP 1 / SP 2 is the median over the pairs of their ratio (each pair's in the by-pair column). " +
        "Each run's MFU is against the MatMul rate that run's trainer measured at start-up (GFLOP/s, in run order in the rates columns).",
      "",
      "| N | SP 1 tok/s | SP 1 MFU | SP 2 tok/s | SP 2 MFU | SP 1 / SP 2 | by pair | SP 1 runs | SP 2 runs | SP 1 rates | SP 2 rates |",
      "|---|---|---|---|---|---|---|---|---|---|---|",
    );
    for (const seq of f.speedSeq) {
      const a = speed.find((r) => r.sp === 1 && r.seq === seq);
      const b = speed.find((r) => r.sp === 2 && r.seq === seq);
      if (!a || !b) continue;
      const ratios = pairRatios(a, b);
      const ratio = median(ratios);
      lines.push(
        `| ${seq} | ${a.tokensPerSec.toFixed(0)} | ${(100 * a.mfu).toFixed(1)}% | ${b.tokensPerSec.toFixed(0)} | ${(100 * b.mfu).toFixed(1)}% | ${ratio.toFixed(2)} | ${ratios.map((x) => x.toFixed(2)).join(", ")} | ${a.speeds.map((t) => t.toFixed(0)).join(", ")} | ${b.speeds.map((t) => t.toFixed(0)).join(", ")} | ${gflops(a.rates)} | ${gflops(b.rates)} |`,
      );
      check(b.mfu >= 0.7, `SP 2 MFU at N = ${seq}: ${(100 * b.mfu).toFixed(1)}% >= 70%`);
      check(ratio >= 0.9, `SP 1 at N = ${seq}: ${ratio.toFixed(2)} of SP 2 (median over pairs of runs) >= 0.90`);
    }
  }
  const long = rows.find((r) => r.group === "long");
  if (long) {
    lines.push(
      "",
      `## N = 131072`,
      "",
      `One lean step at SP 2: peak RSS ${gib(long.peakBytes)}, step ${(long.stepMs / 1000).toFixed(0)} s, wall ${long.wallSeconds.toFixed(0)} s.`,
    );
    check(long.peakBytes <= 3 * 2 ** 30, `N = 131072, SP 2, lean: peak ${gib(long.peakBytes)} <= 3 GiB`);
  }
  lines.push("", "## The account, term by term (largest row of each mode)", "");
  for (const mode of MODES) {
    const r = rows.filter((x) => x.group === "memory" && x.mode === mode && x.sp === 2).at(-1);
    if (!r) continue;
    lines.push(`SP 2, ${mode}, N = ${r.seq}: measured ${gib(r.peakBytes)}, account ${gib(r.estimate.bytes)}`, "", "| term | MiB |", "|---|---|");
    for (const t of r.estimate.terms) lines.push(`| ${t.name} | ${(t.bytes / MiB).toFixed(1)} |`);
    lines.push("");
  }
  lines.push("## Targets", "", ...checks.map((c) => `- ${c}`), "", "## Commands", "", ...rows.map((r) => `- \`${r.command}\``), "");
  fs.writeFileSync(path.join(outRoot, "memory.md"), lines.join("\n"));
  fs.writeFileSync(path.join(outRoot, "memory.json"), `${JSON.stringify({ machine, rows }, null, 2)}\n`);
  console.log(`\n${checks.join("\n")}\n\nwrote ${path.relative(REPO_ROOT, path.join(outRoot, "memory.md"))} and memory.json`);
}

await main();
