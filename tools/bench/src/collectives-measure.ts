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
 * memcpy = one thread copying S bytes with TypedArray.set between reused
 * ordinary buffers, timed the same way, in the same run, two ways: "hot"
 * copies the same pair again and again (at 8 MiB that stays in this CPU's
 * large L3 cache), "cold" rotates over pairs totalling >= 256 MiB so every
 * copy comes from memory, as the collectives' own copies do (their working
 * set, inputs + outputs + outboxes of all ranks, is far larger than the
 * cache). The ratios use the cold figure; the table shows both.
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
  /** Out-of-cache single-thread memcpy (the ratios' reference). */
  memcpyGBps: number;
  /** The same pair copied repeatedly (cache-resident for small sizes). */
  memcpyHotGBps: number;
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

function bestSecondsPerCopy(pairs: { src: Uint8Array; dst: Uint8Array }[], iters: number, rounds: number): number {
  let best = Infinity;
  for (let round = 0; round < rounds; round++) {
    const start = performance.now();
    for (let i = 0; i < iters; i++) {
      const pair = pairs[i % pairs.length]!;
      pair.dst.set(pair.src);
    }
    best = Math.min(best, (performance.now() - start) / 1000 / iters);
  }
  return best;
}

function memcpyBandwidth(sizesMiB: number[], hot: boolean, targetBytes: number, rounds: number): Map<number, number> {
  const result = new Map<number, number>();
  for (const mib of sizesMiB) {
    const bytes = Math.round(mib * MiB);
    const count = hot ? 1 : Math.max(1, Math.ceil((256 * MiB) / (2 * bytes)));
    // buffers filled once (fresh pages are paid here, not in the timing)
    const pairs = Array.from({ length: count }, () => ({ src: new Uint8Array(bytes).fill(1), dst: new Uint8Array(bytes).fill(2) }));
    const iters = Math.max(itersFor(bytes, targetBytes), count);
    bestSecondsPerCopy(pairs, count, 1);
    result.set(mib, bytes / bestSecondsPerCopy(pairs, iters, rounds) / 1e9);
  }
  return result;
}

/** Out-of-cache single-thread TypedArray.set bandwidth per size (GB/s): the ratios' reference. */
export function measureMemcpy(sizesMiB: number[], targetBytes = 128 * MiB, rounds = 5): Map<number, number> {
  return memcpyBandwidth(sizesMiB, false, targetBytes, rounds);
}

/** The same pair copied again and again (cache-resident for small sizes), GB/s per size. */
export function measureMemcpyHot(sizesMiB: number[], targetBytes = 128 * MiB, rounds = 5): Map<number, number> {
  return memcpyBandwidth(sizesMiB, true, targetBytes, rounds);
}

/** Combines every rank's timings (index = rank) into table rows. */
export function summarize(
  backend: string,
  perRank: RankTiming[][],
  memcpy: Map<number, number>,
  sizesMiB: number[],
  memcpyHot = new Map<number, number>(),
): BenchRow[] {
  const ranks = perRank.length;
  return perRank[0]!.map((first, k) => {
    // slowest rank per round, fastest round
    const seconds = Math.min(...first.rounds.map((_, round) => Math.max(...perRank.map((timings) => timings[k]!.rounds[round]!))));
    const mib = sizesMiB.find((m) => Math.abs(Math.round(m * MiB) - first.bytes) < 4 * ranks) ?? first.bytes / MiB;
    const memcpyGBps = memcpy.get(mib) ?? NaN;
    const memcpyHotGBps = memcpyHot.get(mib) ?? NaN;
    const perRankGBps = first.bytes / seconds / 1e9;
    return {
      backend,
      ranks,
      op: first.op,
      mib,
      msPerCall: seconds * 1000,
      perRankGBps,
      aggregateGBps: perRankGBps * ranks,
      memcpyGBps,
      memcpyHotGBps,
      perRankRatio: perRankGBps / memcpyGBps,
      aggregateRatio: (perRankGBps * ranks) / memcpyGBps,
    };
  });
}

export function printTable(rows: readonly BenchRow[]): void {
  const header = ["backend", "P", "op", "MiB/rank", "ms/call", "GB/s/rank", "GB/s aggr", "memcpy cold", "memcpy hot", "rank/memcpy", "aggr/memcpy"];
  const lines = rows.map((r) => [
    r.backend,
    String(r.ranks),
    r.op,
    String(r.mib),
    r.msPerCall.toFixed(2),
    r.perRankGBps.toFixed(2),
    r.aggregateGBps.toFixed(2),
    r.memcpyGBps.toFixed(2),
    r.memcpyHotGBps.toFixed(2),
    `${(r.perRankRatio * 100).toFixed(0)}%`,
    `${(r.aggregateRatio * 100).toFixed(0)}%`,
  ]);
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
