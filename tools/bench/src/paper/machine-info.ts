/**
 * What `bench:paper` says about the machine it ran on: cores, the CPU model
 * from /proc/cpuinfo, memory, Node and onnxruntime-node versions, and the
 * load average before and after (the machine may be shared).
 */
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";

export interface MachineInfo {
  cores: number;
  cpuModel: string;
  memoryGiB: number;
  node: string;
  onnxruntime: string;
  loadBefore: number[];
  loadAfter?: number[];
}

function cpuModel(): string {
  try {
    const line = fs
      .readFileSync("/proc/cpuinfo", "utf8")
      .split("\n")
      .find((l) => l.startsWith("model name"));
    if (line !== undefined) return line.split(":").slice(1).join(":").trim();
  } catch {
    // not Linux: fall back to what Node reports
  }
  return os.cpus()[0]?.model ?? "unknown";
}

function onnxruntimeVersion(): string {
  try {
    const entry = createRequire(import.meta.url).resolve("onnxruntime-node");
    let dir = path.dirname(entry);
    while (!fs.existsSync(path.join(dir, "package.json")) && dir !== path.dirname(dir)) dir = path.dirname(dir);
    return (JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")) as { version: string }).version;
  } catch {
    return "unknown";
  }
}

export function machineInfo(): MachineInfo {
  return {
    cores: os.availableParallelism(),
    cpuModel: cpuModel(),
    memoryGiB: os.totalmem() / 2 ** 30,
    node: process.version,
    onnxruntime: onnxruntimeVersion(),
    loadBefore: os.loadavg(),
  };
}

export function describeMachine(m: MachineInfo): string {
  const load = (l: number[] | undefined) => (l === undefined ? "?" : l.map((x) => x.toFixed(2)).join(" "));
  return `${m.cores} cores (${m.cpuModel}), ${m.memoryGiB.toFixed(0)} GiB, Node ${m.node}, onnxruntime-node ${m.onnxruntime}; load average (1/5/15 min) ${load(m.loadBefore)} before, ${load(m.loadAfter)} after`;
}
