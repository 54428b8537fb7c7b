/**
 * Test support: runs a TypeScript entry under mpirun (mpirunCommand's flags,
 * with tsx and the workspace's source condition) from the
 * repository root and collects its output, exit code and duration. A hard
 * wall-clock limit kills mpirun's process group so a hang fails the test
 * instead of stalling it.
 */
import { spawn } from "node:child_process";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { mpirunCommand, SOURCE_CONDITION_ARG } from "../launch.js";

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
export const FIXTURES = dirname(fileURLToPath(import.meta.url));

export interface MpirunResult {
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  ms: number;
  killed: boolean;
}

export function spawnMpirun(np: number, entry: string, args: readonly string[], limitMs: number): Promise<MpirunResult> {
  // the fixtures are TypeScript and the workspace packages run from source
  const [command, ...rest] = mpirunCommand({ np, entry, args, typescript: true, nodeArgs: [SOURCE_CONDITION_ARG] });
  const start = performance.now();
  const child = spawn(command, rest, { cwd: REPO_ROOT, env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" }, detached: true });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  let killed = false;
  const timer = setTimeout(() => {
    killed = true;
    process.kill(-child.pid!, "SIGKILL");
  }, limitMs);
  return new Promise((resolvePromise) => {
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolvePromise({ code, signal, stdout, stderr, ms: performance.now() - start, killed });
    });
  });
}

/** The JSON payloads of lines starting with `marker `. */
export function markedLines<T>(output: string, marker: string): T[] {
  return output
    .split("\n")
    .filter((line) => line.startsWith(`${marker} `))
    .map((line) => {
      try {
        return JSON.parse(line.slice(marker.length + 1)) as T;
      } catch (cause) {
        throw new Error(`unreadable ${marker} line: ${line.slice(0, 400)}`, { cause });
      }
    });
}
