/**
 * The memory available to this process on this machine, for a preflight that
 * holds an estimate against it: the tightest cgroup limit (v1 or v2, up the
 * hierarchy), MemAvailable, and an override in the environment. Readers of
 * /proc and /sys are injectable, so each source is tested on chosen files.
 */
import fs from "node:fs";
import os from "node:os";
import { MeasureError } from "./errors.js";

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

export interface AvailableMemoryOptions {
  /** The environment that may hold ULYSSES_MEMORY_LIMIT (default process.env). */
  env?: NodeJS.ProcessEnv;
  /** File reader for /proc and /sys (tests inject one). */
  read?: ReadText;
  /** os.freemem() (tests inject one). */
  freemem?: () => number;
}

/**
 * The memory a process may use: the smallest of the cgroup limit, MemAvailable
 * (os.freemem() where /proc/meminfo is missing) and ULYSSES_MEMORY_LIMIT
 * (bytes, or with a K/M/G/T suffix) when set; a malformed
 * ULYSSES_MEMORY_LIMIT throws a MeasureError naming it.
 */
export function availableMemory(options: AvailableMemoryOptions = {}): AvailableMemory {
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
    if (bytes === null) throw new MeasureError(`ULYSSES_MEMORY_LIMIT='${override}' is not a byte count (use e.g. 8G, 512M or 1073741824)`);
    found.push({ bytes, source: "ULYSSES_MEMORY_LIMIT" });
  }
  return found.reduce((a, b) => (b.bytes < a.bytes ? b : a));
}

const MiB = 1024 * 1024;

/** "1.5 GiB", "320.0 MiB" */
export function formatBytes(bytes: number): string {
  if (bytes >= 2 ** 40) return `${(bytes / 2 ** 40).toFixed(2)} TiB`;
  if (bytes >= 2 ** 30) return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
  if (bytes >= MiB) return `${(bytes / MiB).toFixed(1)} MiB`;
  return `${(bytes / 1024).toFixed(1)} KiB`;
}
