/**
 * Measuring and printing collective bandwidth, shared by every launcher of
 * the collectives benchmark: the threads launcher (collectives-bench.ts) and
 * any other (an MPI entry calls `measureRank` on each rank, gathers the
 * timings on rank 0, then `summarize`, `printTable` and `writeResults`).
 *
 * Definitions: S = bytes of each rank's input. per-rank bandwidth = S / t,
 * aggregate = P * S / t. Each size is timed in several rounds (all ranks start
 * a round together after a barrier); a round's time per call is the slowest
 * rank's, and t is the fastest round (the machines are shared and noisy).
 * memcpy = one thread copying S bytes between two reused ordinary buffers with
 * TypedArray.set, timed the same way, in the same run.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Tensor } from "@ulysses/tensors";
import type { ProcessGroup } from "@ulysses/collectives";

export type BenchOp = "allToAll" | "allReduce";

export interface BenchConfig {
  sizesMiB: number[];
  ops: BenchOp[];
  /** Bytes each round moves at least (sets the iteration count; default 128 MiB). */
  targetBytes?: number;
  /** Rounds per size (default 5). */
  rounds?: number;
}

export interface RankTiming {
  op: BenchOp;
  bytes: number;
  iters: number;
  /** Mean seconds per call on this rank, per round. */
  rounds: number[];
}

export interface BenchRow {
  backend: string;
  ranks: number;
  op: BenchOp | "memcpy";
  mib: number;
  msPerCall: number;
  perRankGBps: number;
  aggregateGBps: number;
  memcpyGBps: number;
  /** per-rank bandwidth / memcpy bandwidth */
  perRankRatio: number;
  /** aggregate bandwidth / memcpy bandwidth */
  aggregateRatio: number;
}

const MiB = 1 << 20;
const itersFor = (bytes: number, target: number) => Math.max(3, Math.ceil(target / bytes));

/** Runs on every rank of `group` (collective): times each op and size. */
export async function measureRank(group: ProcessGroup, config: BenchConfig): Promise<RankTiming[]> {
  const timings: RankTiming[] = [];
  const target = config.targetBytes ?? 128 * MiB;
  for (const mib of config.sizesMiB) {
    const bytes = Math.round(mib * MiB);
    const elements = Math.floor(bytes / 4 / group.size) * group.size;
    // buffers allocated once per size and reused by every iteration
    const input = new Tensor("float32", [elements]);
    const output = new Tensor("float32", [elements]);
    for (const op of config.ops) {
      const call = () => (op === "allToAll" ? group.allToAll(input, { output }) : group.allReduce(input));
      for (let w = 0; w < 2; w++) await call();
      const iters = itersFor(bytes, target);
      const rounds: number[] = [];
      for (let round = 0; round < (config.rounds ?? 5); round++) {
        await group.barrier();
        const start = performance.now();
        for (let i = 0; i < iters; i++) await call();
        rounds.push((performance.now() - start) / 1000 / iters);
      }
      timings.push({ op, bytes: elements * 4, iters, rounds });
    }
  }
  return timings;
}

/** Single-thread TypedArray.set bandwidth for each size, in this thread. */
export function measureMemcpy(sizesMiB: number[], targetBytes = 128 * MiB, rounds = 5): Map<number, number> {
  const result = new Map<number, number>();
  for (const mib of sizesMiB) {
    const bytes = Math.round(mib * MiB);
    const src = new Uint8Array(bytes).fill(1);
    const dst = new Uint8Array(bytes);
    for (let w = 0; w < 2; w++) dst.set(src);
    const iters = itersFor(bytes, targetBytes);
    let best = Infinity;
    for (let round = 0; round < rounds; round++) {
      const start = performance.now();
      for (let i = 0; i < iters; i++) dst.set(src);
      best = Math.min(best, (performance.now() - start) / 1000 / iters);
    }
    result.set(mib, bytes / best / 1e9);
  }
  return result;
}

/** Combines every rank's timings (index = rank) into table rows. */
export function summarize(backend: string, perRank: RankTiming[][], memcpy: Map<number, number>, sizesMiB: number[]): BenchRow[] {
  const ranks = perRank.length;
  return perRank[0]!.map((first, k) => {
    // slowest rank per round, fastest round
    const seconds = Math.min(...first.rounds.map((_, round) => Math.max(...perRank.map((timings) => timings[k]!.rounds[round]!))));
    const mib = sizesMiB.find((m) => Math.abs(Math.round(m * MiB) - first.bytes) < 4 * ranks) ?? first.bytes / MiB;
    const memcpyGBps = memcpy.get(mib) ?? NaN;
    const perRankGBps = first.bytes / seconds / 1e9;
    return { backend, ranks, op: first.op, mib, msPerCall: seconds * 1000, perRankGBps, aggregateGBps: perRankGBps * ranks, memcpyGBps, perRankRatio: perRankGBps / memcpyGBps, aggregateRatio: (perRankGBps * ranks) / memcpyGBps };
  });
}

export function printTable(rows: readonly BenchRow[]): void {
  const header = ["backend", "P", "op", "MiB/rank", "ms/call", "GB/s/rank", "GB/s aggr", "memcpy GB/s", "rank/memcpy", "aggr/memcpy"];
  const lines = rows.map((r) => [r.backend, String(r.ranks), r.op, String(r.mib), r.msPerCall.toFixed(2), r.perRankGBps.toFixed(2), r.aggregateGBps.toFixed(2), r.memcpyGBps.toFixed(2), `${(r.perRankRatio * 100).toFixed(0)}%`, `${(r.aggregateRatio * 100).toFixed(0)}%`]);
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const fmt = (cells: string[]) => `| ${cells.map((c, i) => c.padStart(widths[i]!)).join(" | ")} |`;
  console.log(fmt(header));
  console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
  for (const l of lines) console.log(fmt(l));
}

/** Writes `payload` to bench-results/<name> at the repository root; returns the path. */
export function writeResults(name: string, payload: unknown): string {
  const dir = fileURLToPath(new URL("../../../bench-results/", import.meta.url));
  mkdirSync(dir, { recursive: true });
  const file = `${dir}${name}`;
  writeFileSync(file, `${JSON.stringify(payload, null, 2)}\n`);
  return file;
}
