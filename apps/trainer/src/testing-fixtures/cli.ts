/**
 * Helpers for the trainer's tests (not built or published): the flags of a
 * tiny model, and a trainer process spawned the way a user runs it (plain
 * node with the source condition and tsx, telemetry off), its output
 * collected. No trainer logic lives here.
 */
import { type ChildProcess, spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** apps/trainer. */
export const trainerDir = path.dirname(path.dirname(path.dirname(fileURLToPath(import.meta.url))));

/** A model small enough for a test run in seconds: 1 layer, hidden 16, seq 24, recall over 3 keys x 4 values (vocab 16), `heads` heads (kv heads the same). */
export function tinyFlags(heads = 2): string[] {
  const flags: Record<string, number> = { seq: 24, hidden: 16, heads, "kv-heads": heads, layers: 1, batch: 2, keys: 3, values: 4, threads: 1 };
  return Object.entries(flags).flatMap(([name, value]) => [`--${name}`, String(value)]);
}

export interface Spawned {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** When the process exited (epoch ms). */
  exitedAt: number;
}

export interface SpawnOptions {
  env?: Record<string, string>;
  /** Called with all stdout so far on every chunk. */
  onStdout?: (text: string, child: ChildProcess) => void;
  /** The command (default: this node running `script` under tsx). */
  command?: string;
  /** The entry under apps/trainer (default src/cli.ts), when `command` is node. */
  script?: string;
}

/** The environment variables of testing-fixtures/fault-injector.ts. */
const FAULT_VARIABLES = ["ULYSSES_TRAINER_FAULT", "ULYSSES_TRAINER_FAIL"];

/** Runs the trainer CLI (or `options.command`) with `args` in apps/trainer; resolves when it has closed. */
export function spawnTrainer(args: string[], options: SpawnOptions = {}): Promise<Spawned> {
  const command = options.command ?? process.execPath;
  // a test that injects a fault preloads the injector (every rank's thread inherits the flag)
  const faults = Object.keys(options.env ?? {}).some((name) => FAULT_VARIABLES.includes(name));
  const injector = faults ? ["--import", "./src/testing-fixtures/fault-injector.ts"] : [];
  const argv = options.command === undefined ? ["--conditions=@ulysses/source", "--import", "tsx", ...injector, options.script ?? "src/cli.ts", ...args] : args;
  return new Promise((resolve) => {
    const child = spawn(command, argv, { cwd: trainerDir, env: { ...process.env, ORT_DISABLE_TELEMETRY: "1", INIT_CWD: "", ...options.env } });
    let stdout = "";
    let stderr = "";
    let exitedAt = 0;
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
      options.onStdout?.(stdout, child);
    });
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    child.on("exit", () => {
      exitedAt = Date.now();
    });
    child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr, exitedAt }));
  });
}

/** The loss of every step a run wrote to `dir`/metrics.jsonl. */
export function lossCurve(dir: string): number[] {
  return fs
    .readFileSync(path.join(dir, "metrics.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((line) => (JSON.parse(line) as { loss: number }).loss);
}
