#!/usr/bin/env node
/**
 * `ulysses-train` (`pnpm train` in the repository): parses flags (and
 * --config), validates them before any rank starts, prepares the run
 * directory, picks the launcher for the backend and hands over to the driver
 * (`run.ts`). Exit codes: 0 done, 1 error (a rank's failure names the rank
 * and its cause), 2 bad flags, 130 stopped by SIGINT (Ctrl-C), 143 stopped by
 * SIGTERM; a stopped run has saved a checkpoint and written its outputs.
 */
import fs from "node:fs";
import path from "node:path";
import { loadCheckpoint } from "@ulysses/model";
import { helpText, parseArgs } from "./args.js";
import { launcherRank, validateConfig, type TrainConfig } from "./config.js";
import { EXIT, isMainModule, packageVersion } from "./entry-point.js";
import { TrainerError } from "./errors.js";
import { startPool } from "./launchers.js";
import { SIGNAL_EXIT_CODES, resolveResumeFile, runTraining } from "./run.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

function timestamp(): string {
  return new Date().toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z").replace("T", "-");
}

/** The run directory: --out, the resumed run's directory, or runs/<timestamp> (linked as runs/latest). */
function prepareOutDir(config: TrainConfig, resumeFile: string | null, writer: boolean): string {
  // under mpirun every process computes the name; only rank 0 creates it (give --out so all agree on it)
  const out = config.out ?? (resumeFile !== null ? path.dirname(resumeFile) : path.join("runs", timestamp()));
  if (!writer) return path.resolve(out);
  fs.mkdirSync(out, { recursive: true });
  if (config.out === null && resumeFile === null) {
    const latest = path.join("runs", "latest");
    fs.rmSync(latest, { force: true });
    try {
      fs.symlinkSync(path.basename(out), latest);
    } catch {
      // symlinks may be unavailable (some file systems); the run directory is printed anyway
    }
  }
  return path.resolve(out);
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

export async function main(argv: readonly string[]): Promise<number> {
  // pnpm runs scripts in the package directory; paths are meant relative to where the user typed the command
  if (process.env.INIT_CWD) process.chdir(process.env.INIT_CWD);
  let config: TrainConfig;
  let resumeFile: string | null = null;
  try {
    const parsed = parseArgs(argv);
    if (parsed.help) {
      process.stdout.write(`${helpText()}\n`);
      return EXIT.done;
    }
    if (parsed.version) {
      process.stdout.write(`${packageVersion()}\n`);
      return EXIT.done;
    }
    config = parsed.config;
    if (config.resume !== null) {
      resumeFile = resolveResumeFile(config.resume);
      // the checkpoint's settings, overridden by what this command line says explicitly
      const saved = loadCheckpoint(resumeFile).settings as Partial<TrainConfig> | undefined;
      const explicit = Object.fromEntries([...parsed.explicit].map((k) => [k, config[k]]));
      config = { ...config, ...(saved ?? {}), ...explicit, resume: config.resume };
    }
    validateConfig(config);
  } catch (error) {
    process.stderr.write(`error: ${describeError(error)}\n`);
    return EXIT.badFlags;
  }
  try {
    const writer = (launcherRank() ?? 0) === 0;
    const outDir = prepareOutDir(config, resumeFile, writer);
    if (writer) fs.writeFileSync(path.join(outDir, "config.json"), `${JSON.stringify(config, null, 2)}\n`);
    const result = await runTraining({ config, outDir, resumeFile, startPool: () => startPool(config, resumeFile) });
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
