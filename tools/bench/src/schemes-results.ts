/**
 * `pnpm bench:schemes`' result rows: what one row measured at one N, the
 * bytes the scheme's descriptor says each rank sends (checked against the
 * groups' counters), the layout's ring work balance, and the tables' text.
 */
import { headRouting, sequenceParallelScheme, shardRuns } from "@ulysses/parallel";
import { medianOfSlowest } from "@ulysses/measure";
import type { Flags, RowId } from "./schemes-flags.js";
import type { KernelKind, RankSteps, SchemeRow } from "./schemes-rank.js";

export interface ResultRow {
  id: RowId;
  label: string;
  scheme: SchemeRow["scheme"];
  layout: SchemeRow["layout"];
  P: number;
  u: number;
  r: number;
  N: number;
  heads: number;
  kvHeads: number;
  hidden: number;
  headDim: number;
  batch: number;
  overlap: boolean;
  kernel: KernelKind;
  stepSeconds: number;
  /** The slowest rank's step time of each timed iteration. */
  stepSecondsPerIter: number[];
  /** Attention bytes each rank sent in one step (the median iteration), and what scheme-bytes.ts says. */
  bytesPerRank: number[];
  expectedBytesPerRank: number[];
  bytesMatch: boolean;
  /** The gradient all-reduce's bytes per rank (not in bytesPerRank). */
  gradBytesPerRank: number[];
  computeSecondsPerRank: number[] | null;
  waitSecondsPerRank: number[] | null;
  ringCallsPerRank: number[] | null;
  /** Slowest / fastest rank's ring compute time. */
  computeRatio: number | null;
  /** Most / least causal attention work (pairs x heads) of a rank's ring, from the layout alone. */
  workRatio: number | null;
}

export function label(row: SchemeRow, kvHeads: number): string {
  const overlap = row.overlap ? "" : ", no overlap";
  if (row.scheme === "ulysses") return `Ulysses P=${row.u}${row.u > kvHeads ? ` (kv x${row.u / kvHeads})` : ""}`;
  if (row.scheme === "ring") return `ring ${row.layout}${overlap}`;
  return `hybrid ${row.u}x${row.r} ${row.layout}${overlap}`;
}

/** Bytes rank `rank` sends per attention call (forward + backward) under `row`, from scheme-bytes.ts. */
export function expectedBytes(row: SchemeRow, f: Flags, n: number, rank: number): number {
  const p = f.ranks;
  const headDim = f.hidden / f.heads;
  const runs = shardRuns(n, p, row.layout, row.r);
  const sizes = runs.map((rs) => rs.reduce((a, run) => a + run.length, 0));
  const skipsFuture = row.layout === "contiguous"; // causal block
  const bytes = sequenceParallelScheme(row.scheme).bytes({
    sizes,
    rank,
    batch: f.batch,
    heads: f.heads,
    kvHeads: f.kvHeads,
    headDim,
    degrees: { ulyssesDegree: row.u, ringDegree: row.r },
    skipsFuture,
  });
  return bytes.forward + bytes.backward;
}

/**
 * Causal (query, key) pairs × query heads each rank's ring computes (forward and backward alike), from
 * the layout: ring, a rank's own tokens; hybrid, its Ulysses group's tokens with its share of the heads.
 * Null for Ulysses. The ratio of its max to min is the imbalance the layout alone causes.
 */
export function ringWork(row: SchemeRow, f: Flags, n: number): number[] | null {
  if (row.scheme === "ulysses") return null;
  const runs = shardRuns(n, f.ranks, row.layout, row.r);
  const routing = headRouting(f.heads, f.kvHeads, row.u);
  const pairs = (rs: readonly { start: number; length: number }[]) =>
    rs.reduce((a, run) => a + run.length * run.start + (run.length * (run.length + 1)) / 2, 0);
  return runs.map((_, rank) => {
    const g = Math.floor(rank / row.u);
    return pairs(runs.slice(g * row.u, g * row.u + row.u).flat()) * routing.q[rank % row.u]!.count;
  });
}

export function resultRow(row: SchemeRow, f: Flags, n: number, ranks: RankSteps[]): ResultRow {
  const p = f.ranks;
  const iters = ranks[0]!.stepMs.length;
  const slowest = Array.from({ length: iters }, (_, i) => Math.max(...ranks.map((r) => r.stepMs[i]!)) / 1000);
  const stepSeconds = medianOfSlowest(ranks.map((r) => r.stepMs.map((t) => t / 1000)));
  const at = slowest.indexOf(stepSeconds); // the median iteration
  const bytesPerRank = ranks.map((r) => r.attentionBytes[at]!);
  const expectedBytesPerRank = Array.from({ length: p }, (_, rank) => expectedBytes(row, f, n, rank));
  const stable = ranks.every((r) => r.attentionBytes.every((b) => b === r.attentionBytes[0]));
  const perRank = (pick: (r: RankSteps) => number[] | null, scale: number) => {
    if (ranks.some((r) => pick(r) === null)) return null;
    return ranks.map((r) => pick(r)![at]! * scale);
  };
  const computeSecondsPerRank = perRank((r) => r.computeMs, 1 / 1000);
  const work = ringWork(row, f, n);
  return {
    id: row.id as RowId,
    label: label(row, f.kvHeads),
    scheme: row.scheme,
    layout: row.layout,
    P: p,
    u: row.u,
    r: row.r,
    N: n,
    heads: f.heads,
    kvHeads: f.kvHeads,
    hidden: f.hidden,
    headDim: f.hidden / f.heads,
    batch: f.batch,
    overlap: row.overlap,
    kernel: f.kernel,
    stepSeconds,
    stepSecondsPerIter: slowest,
    bytesPerRank,
    expectedBytesPerRank,
    bytesMatch: stable && bytesPerRank.every((b, i) => b === expectedBytesPerRank[i]),
    gradBytesPerRank: ranks.map((r) => r.gradBytes[at]!),
    computeSecondsPerRank,
    waitSecondsPerRank: perRank((r) => r.waitMs, 1 / 1000),
    ringCallsPerRank: perRank((r) => r.calls, 1),
    computeRatio: computeSecondsPerRank === null ? null : Math.max(...computeSecondsPerRank) / Math.min(...computeSecondsPerRank),
    workRatio: work === null ? null : Math.max(...work) / Math.min(...work),
  };
}

export interface OverlapPair {
  scheme: "ring" | "hybrid";
  label: string;
  N: number;
  stepSecondsOverlap: number;
  stepSecondsNoOverlap: number;
  /** Mean over ranks of the ring's wait per step without overlap: the transfers awaited before each compute. */
  transferSeconds: number;
  waitSecondsOverlap: number;
  /** (a) 1 − wait(overlap) / wait(no overlap) */
  hiddenByWait: number;
  /** (b) (step(no overlap) − step(overlap)) / wait(no overlap) */
  hiddenByStep: number;
}

export interface Rates {
  attention: {
    N: number;
    seqQ: number;
    seqK: number;
    heads: number;
    kvHeads: number;
    headDim: number;
    causal: boolean;
    flops: number;
    seconds: number;
    gflopsPerRank: number;
  }[];
  gemm: { N: number; rows: number; hidden: number; flops: number; seconds: number; gflopsPerRank: number }[];
  p2p: { bytes: number; iters: number; seconds: number; gbPerSecondPerRank: number }[];
  p2pLatencySeconds: number;
  /** Slope between the smallest and the largest message: bytes per second of one rank's send (and its receive). */
  p2pBandwidthBytesPerSecond: number;
}

export const mib = (b: number) => (b / 2 ** 20).toFixed(2);
export const sec = (s: number) => s.toFixed(2);
export const pct = (x: number) => `${(100 * x).toFixed(0)}%`;

export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padStart(widths[i]!)).join(" | ")} |`;
  return [line(header), `|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`, ...rows.map(line)].join("\n");
}

/** Every rank's values "a/b/c/d" (or "-"). */
export const perRankText = (xs: number[] | null, fmt: (x: number) => string) => (xs === null ? "-" : xs.map(fmt).join("/"));
export const allSame = (xs: number[]) => xs.every((x) => x === xs[0]);
