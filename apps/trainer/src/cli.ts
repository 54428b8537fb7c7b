#!/usr/bin/env node
/**
 * `ulysses-train` (`pnpm train` in the repository): parses flags (and
 * --config), validates them before any rank starts, prepares the run
 * directory, picks the launcher for the backend and hands over to the driver
 * (`run.ts`). Nothing is written before every check has passed (flags,
 * the resumed checkpoint against them, the run directory, the metrics
 * history). A checkpoint supplies plain data only: never the backend module,
 * the data file or the run directory. Exit codes: 0 done, 1 error (a rank's
 * failure names the rank and its cause), 2 bad flags (or a file they name;
 * nothing was started or written), 130 stopped by SIGINT (Ctrl-C), 143
 * stopped by SIGTERM; a stopped run has saved a checkpoint and written its
 * outputs.
 */
import fs from "node:fs";
import path from "node:path";
import type { GptConfig } from "@ulysses/model";
import { loadBackend, launcherRank } from "@ulysses/collectives";
import { checkRunDir, clearRunFiles, createRunDir, inspectCheckpoint, readMetricsFile, removeStaleTemporaries, type RunDirState } from "@ulysses/training";
import { helpText, parseArgs, resumeSettings } from "./args.js";
import { isModulePath, type TrainConfig } from "./config.js";
import { validateConfig } from "./validate.js";
import { checkMemory, resolveMemoryArena } from "./preflight.js";
import { EXIT, isMainModule, packageVersion, refusalNote } from "./entry-point.js";
import { TrainerError } from "./errors.js";
import { planRun, type RunPlan } from "./plan.js";
import { RankPool } from "./rank-pool.js";
import { RUN_FILES, SIGNAL_EXIT_CODES, resolveResumeFile, runTraining } from "./run.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

/** The flags a run directory's messages name. */
const FLAG_NAMES = { resume: "--resume", out: "--out", overwrite: "--overwrite" };

function timestamp(): string {
  return new Date()
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d+Z$/, "Z")
    .replace("T", "-");
}

/** A fresh runs/<timestamp> (with a -2, -3, ... suffix when that name is taken). */
function defaultOutDir(): string {
  const base = path.join("runs", timestamp());
  let out = base;
  for (let n = 2; fs.existsSync(out); n++) out = `${base}-${n}`;
  return out;
}

function describeError(error: unknown): string {
  const lines: string[] = [];
  let e: unknown = error;
  while (e instanceof Error && lines.length < 4) {
    lines.push(lines.length === 0 ? e.message : `caused by: ${e.message}`);
    e = e.cause;
    if (e instanceof Error && lines.some((l) => l.includes(e instanceof Error ? e.message : ""))) break;
  }
  return lines.join("\n  ");
}

/** Everything decided before the first file is written. */
interface Prepared {
  config: TrainConfig;
  resumeFile: string | null;
  outDir: string;
  /** The flag the run directory came from (for messages). */
  outFlag: string;
  state: RunDirState;
  /** The resumed checkpoint's model (its maxSeq and norm included), or null. */
  model: GptConfig | null;
  /** The metrics history a resumed run continues. */
  metricsFrom: string | null;
  notes: string[];
  /** The run resolved once (degrees, model, tiles, arena), handed to every rank. */
  plan: RunPlan;
}

/**
 * Parses, merges a resumed checkpoint's plain settings, validates, and checks
 * the run directory and the metrics history: reads only, writes nothing.
 */
async function plan(argv: readonly string[]): Promise<Prepared | "help" | "version"> {
  const parsed = parseArgs(argv);
  if (parsed.help) return "help";
  if (parsed.version) return "version";
  let config = parsed.config;
  const notes: string[] = [];
  let resumeFile: string | null = null;
  let model: GptConfig | null = null;
  if (config.resume !== null) {
    resumeFile = resolveResumeFile(config.resume);
    let checkpoint: ReturnType<typeof inspectCheckpoint>;
    try {
      // the header only (each rank reads the tensors when it starts)
      checkpoint = inspectCheckpoint(resumeFile);
    } catch (cause) {
      throw new TrainerError(`--resume '${config.resume}': ${(cause as Error).message}`, { cause });
    }
    const resumed = resumeSettings(config, parsed.explicit, checkpoint);
    config = resumed.config;
    notes.push(...resumed.notes);
    model = checkpoint.config;
  }
  try {
    validateConfig(config);
  } catch (error) {
    if (resumeFile === null) throw error;
    throw new TrainerError(`${(error as Error).message}\n  (settings not given on the command line came from checkpoint '${resumeFile}')`, { cause: error });
  }
  if (isModulePath(config.backend)) {
    // imported here, before anything is written, so that a file that is no backend module is a bad flag (exit 2)
    try {
      await loadBackend(config.backend);
    } catch (cause) {
      throw new TrainerError(`--backend '${config.backend}': ${(cause as Error).message}`, { cause });
    }
  }
  // the run planned once: the layout, model, tiles; then the allocation --memory-arena auto stands for (every rank then allocates alike)
  const runPlan = planRun(config, { model: model ?? undefined });
  const arena = resolveMemoryArena(config, { env: process.env, plan: runPlan });
  config = { ...config, memoryArena: arena.memoryArena };
  runPlan.memoryArena = arena.memoryArena;
  if (arena.note !== null) notes.push(arena.note);
  // before anything is written or any rank starts: refuse a run that cannot fit in memory
  checkMemory(config, { env: process.env, skip: config.skipMemoryCheck, plan: runPlan });
  const resumeDir = resumeFile === null ? null : path.dirname(resumeFile);
  const outFlag = config.out === null && resumeDir !== null ? "--resume" : "--out";
  const outDir = config.out ?? resumeDir ?? defaultOutDir();
  const writer = (launcherRank() ?? 0) === 0;
  // under mpirun every process computes the directory; only rank 0 checks and creates it (give --out so all agree)
  const state = writer ? checkRunDir(outDir, { flag: outFlag, resumeDir, overwrite: config.overwrite, run: RUN_FILES, names: FLAG_NAMES }) : "resumed";
  let metricsFrom: string | null = null;
  if (resumeDir !== null && writer) {
    metricsFrom = path.join(resumeDir, "metrics.jsonl");
    const { torn } = readMetricsFile(metricsFrom);
    if (torn !== null)
      notes.push(`metrics file '${metricsFrom}': line ${torn.line} (${torn.bytes} bytes) is a half-written record from an interrupted run; it is dropped`);
  }
  return { config, resumeFile, outDir, outFlag, state, model, metricsFrom, notes, plan: runPlan };
}

/** Creates the run directory and cleans it up for this run (world rank 0 only); the first writes of the run. */
function prepare(p: Prepared, log: (line: string) => void): void {
  createRunDir(p.outDir, p.outFlag); // when it exists: proves it writable
  const stale = removeStaleTemporaries(p.outDir, RUN_FILES);
  if (stale.length > 0)
    log(`note: removed ${stale.length} temporary file${stale.length === 1 ? "" : "s"} an interrupted write left in '${p.outDir}': ${stale.join(", ")}`);
  if (p.state === "overwritten") clearRunFiles(p.outDir, RUN_FILES);
  if (p.config.out === null && p.resumeFile === null) {
    const latest = path.join("runs", "latest");
    try {
      if (fs.lstatSync(latest, { throwIfNoEntry: false })?.isSymbolicLink() !== false) {
        fs.rmSync(latest, { force: true });
        fs.symlinkSync(path.basename(p.outDir), latest);
      }
    } catch {
      // symlinks may be unavailable (some file systems); the run directory is printed anyway
    }
  }
  fs.writeFileSync(path.join(p.outDir, "config.json"), `${JSON.stringify(p.config, null, 2)}\n`);
}

export async function main(argv: readonly string[]): Promise<number> {
  // pnpm runs scripts in the package directory; paths are meant relative to where the user typed the command
  if (process.env.INIT_CWD) process.chdir(process.env.INIT_CWD);
  const note = (line: string) => process.stderr.write(`${line}\n`);
  let p: Prepared;
  const writer = (launcherRank() ?? 0) === 0;
  try {
    const planned = await plan(argv);
    if (planned === "help") {
      process.stdout.write(`${helpText()}\n`);
      return EXIT.done;
    }
    if (planned === "version") {
      process.stdout.write(`${packageVersion()}\n`);
      return EXIT.done;
    }
    p = planned;
    if (writer) {
      for (const line of p.notes) note(`note: ${line}`);
      prepare(p, note);
    }
  } catch (error) {
    process.stderr.write(`error: ${describeError(error)}\n${refusalNote()}`);
    return EXIT.badFlags;
  }
  try {
    const { config, resumeFile, plan: runPlan } = p;
    const result = await runTraining({
      config,
      outDir: path.resolve(p.outDir),
      resumeFile,
      model: p.model ?? undefined,
      metricsFrom: p.metricsFrom ?? undefined,
      plan: runPlan,
      startPool: () => RankPool.start(config, resumeFile, runPlan),
    });
    // a signal that came during the last step changes nothing: the run is complete
    if (!result.interrupted) return EXIT.done;
    return SIGNAL_EXIT_CODES[result.stopSignal ?? "SIGINT"];
  } catch (error) {
    process.stderr.write(`\nerror: ${describeError(error)}\n`);
    return EXIT.error;
  }
}

if (isMainModule(import.meta.url)) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error: unknown) => {
      process.stderr.write(`error: ${error instanceof TrainerError ? error.message : String(error)}\n`);
      process.exit(EXIT.error);
    },
  );
}
