/**
 * The memory preflight: before any rank starts, the run's estimated peak
 * resident memory (memory-account.ts) against the memory available (the
 * cgroup limit, MemAvailable or ULYSSES_MEMORY_LIMIT, whichever is smallest);
 * a run that cannot fit is refused instead of being ended by the kernel's OOM
 * killer minutes later. `--skip-memory-check` turns the check off. Also the
 * arena choice of `--memory-arena auto`.
 */
import fs from "node:fs";
import os from "node:os";
import type { TrainConfig } from "./config.js";
import { TrainerError } from "./errors.js";
import { estimateMemory, type MemoryEstimate } from "./memory-account.js";
import type { RunPlan } from "./plan.js";

export type ReadText = (file: string) => string | null;

const readText: ReadText = (file) => {
  try {
    return fs.readFileSync(file, "utf8");
  } catch {
    return null;
  }
};

/** Values at or above this are cgroup v1's "no limit" (PAGE_COUNTER_MAX pages, about 2^63). */
const CGROUP_V1_UNLIMITED = 2 ** 60;

/** A cgroup memory limit file's value: bytes, or null for no limit ("max", v1's huge sentinel, missing or garbage). */
export function parseCgroupLimit(text: string | null): number | null {
  if (text === null) return null;
  const value = text.trim();
  if (value === "" || value === "max" || !/^\d+$/.test(value)) return null;
  const bytes = Number(value);
  return bytes >= CGROUP_V1_UNLIMITED ? null : bytes;
}

/** `dir` and its ancestors up to (and including) `root`. */
function upTo(root: string, relative: string): string[] {
  const parts = relative.split("/").filter((p) => p !== "" && p !== "." && p !== "..");
  const dirs: string[] = [];
  for (let i = parts.length; i >= 0; i--) dirs.push([root, ...parts.slice(0, i)].join("/"));
  return dirs;
}

export interface CgroupLimit {
  bytes: number;
  file: string;
}

/**
 * The tightest cgroup memory limit over this process's cgroup and its
 * ancestors: cgroup v2 (`memory.max`) and v1 (`memory.limit_in_bytes`),
 * located through /proc/self/cgroup; null when there is none.
 */
export function cgroupMemoryLimit(read: ReadText = readText): CgroupLimit | null {
  const candidates = new Set<string>(["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]);
  for (const line of (read("/proc/self/cgroup") ?? "").split("\n")) {
    const [, controllers, where] = /^\d+:([^:]*):(.*)$/.exec(line.trim()) ?? [];
    if (where === undefined) continue;
    if (controllers === "") for (const dir of upTo("/sys/fs/cgroup", where)) candidates.add(`${dir}/memory.max`);
    if (controllers!.split(",").includes("memory")) for (const dir of upTo("/sys/fs/cgroup/memory", where)) candidates.add(`${dir}/memory.limit_in_bytes`);
  }
  let best: CgroupLimit | null = null;
  for (const file of candidates) {
    const bytes = parseCgroupLimit(read(file));
    if (bytes !== null && (best === null || bytes < best.bytes)) best = { bytes, file };
  }
  return best;
}

/** MemAvailable from /proc/meminfo in bytes, or null. */
export function memAvailable(read: ReadText = readText): number | null {
  const match = /^MemAvailable:\s+(\d+)\s*kB/m.exec(read("/proc/meminfo") ?? "");
  return match === null ? null : Number(match[1]) * 1024;
}

export interface AvailableMemory {
  bytes: number;
  /** Where the number comes from, for the message. */
  source: string;
}

/** Parses a byte count with an optional K, M, G or T suffix (powers of 1024): "8G", "512M", "1073741824". */
export function parseBytes(text: string): number | null {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$/i.exec(text);
  if (match === null) return null;
  const scale = { "": 1, K: 2 ** 10, M: 2 ** 20, G: 2 ** 30, T: 2 ** 40 }[match[2]!.toUpperCase() as "" | "K" | "M" | "G" | "T"];
  return Math.floor(Number(match[1]) * scale);
}

export interface MemoryCheckOptions {
  env?: NodeJS.ProcessEnv;
  /** --skip-memory-check: estimate nothing, refuse nothing. */
  skip?: boolean;
  /** File reader for /proc and /sys (tests inject one). */
  read?: ReadText;
  /** os.freemem() (tests inject one). */
  freemem?: () => number;
  /** The run's plan (default: planned from the config). */
  plan?: RunPlan;
}

/**
 * The memory this run may use: the smallest of the cgroup limit, MemAvailable
 * (os.freemem() where /proc/meminfo is missing) and ULYSSES_MEMORY_LIMIT
 * (bytes, or with a K/M/G/T suffix) when set.
 */
export function availableMemory(options: MemoryCheckOptions = {}): AvailableMemory {
  const read = options.read ?? readText;
  const env = options.env ?? process.env;
  const found: AvailableMemory[] = [];
  const cgroup = cgroupMemoryLimit(read);
  if (cgroup !== null) found.push({ bytes: cgroup.bytes, source: `cgroup limit ${cgroup.file}` });
  const meminfo = memAvailable(read);
  if (meminfo !== null) found.push({ bytes: meminfo, source: "MemAvailable in /proc/meminfo" });
  else found.push({ bytes: (options.freemem ?? os.freemem)(), source: "os.freemem()" });
  const override = env.ULYSSES_MEMORY_LIMIT;
  if (override !== undefined && override !== "") {
    const bytes = parseBytes(override);
    if (bytes === null) throw new TrainerError(`ULYSSES_MEMORY_LIMIT='${override}' is not a byte count (use e.g. 8G, 512M or 1073741824)`);
    found.push({ bytes, source: "ULYSSES_MEMORY_LIMIT" });
  }
  return found.reduce((a, b) => (b.bytes < a.bytes ? b : a));
}

/**
 * --memory-arena auto: arenas and glibc's heap (fast) when the account with
 * them fits in the memory available, else off (freed buffers back to the
 * OS), with a note saying so. true and false are taken as given. The
 * allocation never changes results, only speed and memory.
 */
export function resolveMemoryArena(config: TrainConfig, options: MemoryCheckOptions = {}): { memoryArena: boolean; note: string | null } {
  if (config.memoryArena !== "auto") return { memoryArena: config.memoryArena, note: null };
  const withArenas = estimateMemory({ ...config, memoryArena: true }, options.plan).bytes;
  const available = availableMemory(options);
  if (withArenas <= available.bytes) return { memoryArena: true, note: null };
  return {
    memoryArena: false,
    note:
      `memory: with ONNX Runtime arenas this run needs an estimated ${formatBytes(withArenas)}, more than the ${formatBytes(available.bytes)} available (${available.source}); ` +
      "it runs with arenas off and freed buffers returned to the OS (--no-memory-arena: less memory, slower; --memory-arena forces the arenas)",
  };
}

const MiB = 1024 * 1024;

/** "1.5 GiB", "320.0 MiB" */
export function formatBytes(bytes: number): string {
  if (bytes >= 2 ** 40) return `${(bytes / 2 ** 40).toFixed(2)} TiB`;
  if (bytes >= 2 ** 30) return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
  if (bytes >= MiB) return `${(bytes / MiB).toFixed(1)} MiB`;
  return `${(bytes / 1024).toFixed(1)} KiB`;
}

/** The breakdown as indented lines. */
export function formatEstimate(estimate: MemoryEstimate): string {
  const width = Math.max(...estimate.terms.map((t) => t.name.length));
  return estimate.terms.map((t) => `    ${t.name.padEnd(width)}  ${formatBytes(t.bytes).padStart(10)}`).join("\n");
}

/**
 * Refuses a run whose memory estimate exceeds the memory available, with the
 * estimate (broken down), the limit and where it comes from, and the hint
 * `--skip-memory-check`. Returns the estimate and the limit (null when skipped).
 */
export function checkMemory(config: TrainConfig, options: MemoryCheckOptions = {}): { estimate: MemoryEstimate; available: AvailableMemory } | null {
  if (options.skip === true) return null;
  let estimate: MemoryEstimate;
  try {
    estimate = estimateMemory(config, options.plan);
  } catch (cause) {
    throw new TrainerError(`invalid model size: ${(cause as Error).message}`, { cause });
  }
  const available = availableMemory(options);
  if (estimate.bytes > available.bytes) {
    throw new TrainerError(
      `not enough memory: this run needs an estimated ${formatBytes(estimate.bytes)} (${estimate.bytes} bytes), ` +
        `but ${formatBytes(available.bytes)} (${available.bytes} bytes) is available (${available.source}).\n` +
        `  estimate for ${estimate.ranks} rank${estimate.ranks > 1 ? "s" : ""} on this machine, ${estimate.tokensPerRank} tokens each:\n${formatEstimate(estimate)}\n` +
        `  Use a shorter --seq, a smaller --batch or model, --activation-checkpointing, --tile-mlp, --tile-loss, --tile-attention or --zero1; ` +
        `or pass --skip-memory-check to run anyway.`,
    );
  }
  return { estimate, available };
}
