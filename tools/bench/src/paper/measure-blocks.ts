/**
 * The block measurements of `bench:paper`, one world per P (started once,
 * reused for every row of that P): the block steps the communication,
 * throughput and calibration tables need, the all-to-all rates of the
 * projection profile, and the maximum-sequence search under the memory cap.
 */
import type { BlockConfig } from "@ulysses/block";
import type { SequenceParallelKind } from "@ulysses/parallel";
import { attentionFlops } from "@ulysses/measure";
import { blockGemmFlops } from "./block-gemm.js";
import { searchMaximum } from "./max-seq-search.js";
import type { MemoryAccount } from "./memory-account.js";
import type { PaperFlags } from "./paper-flags.js";
import { PaperWorld, type BlockRow } from "./paper-world.js";

export const KINDS: readonly SequenceParallelKind[] = ["ulysses", "allgather"];

export interface AllToAllRate {
  ranks: number;
  /** Bytes every rank holds (the all-to-all input). */
  bytes: number;
  seconds: number;
  bytesSent: number;
  /** Bytes sent per rank / seconds, GB/s. */
  bandwidthGBs: number;
  /**
   * Latency of the projection profile, microseconds: what a tiny all-to-all
   * (16 floats per peer) adds when every rank runs a block GEMM before each
   * one, as the ranks compute between the messages of a block step.
   */
  latencyUs: number;
  /** A tiny all-to-all between idle ranks, microseconds (for comparison). */
  idleLatencyUs: number;
}

export interface MaxSeqResult {
  ranks: number;
  kind: SequenceParallelKind;
  capBytes: number;
  best: number;
  firstFailure: number;
  /** The busiest rank's account at `best` (null when nothing fitted). */
  account: MemoryAccount | null;
  probes: { seq: number; peakBytes: number; ok: boolean; stepMs: number }[];
}

/**
 * The kernels of the block timed on the ranks of one world, every rank at
 * once (paper-rank.ts `gemmRate`, `attentionRate`): what one of P ranks gets
 * while the others work, for the projection check's rank profiles.
 */
export interface WorldRates {
  ranks: number;
  /** The block's forward GEMMs at `gemmRows` rows: GFLOP/s per rank. */
  gemmRows: number;
  gemmGflops: number;
  /** Causal attention forward + backward at the heads one rank holds (ceil(H/P)): useful GFLOP/s per rank (12·heads·pairs·d). */
  attention: { seq: number; heads: number; seconds: number; gflops: number }[];
}

export interface BlockMeasurements {
  rows: BlockRow[];
  allToAll: AllToAllRate[];
  maxSeq: MaxSeqResult[];
  worldRates: WorldRates[];
}

export const rowKey = (ranks: number, seq: number, kind: SequenceParallelKind) => `${ranks}/${seq}/${kind}`;

/** The (N, kind) rows each P needs, from the flags. */
export function plannedRows(f: PaperFlags): Map<number, { seq: number; kind: SequenceParallelKind }[]> {
  const plan = new Map<number, Map<string, { seq: number; kind: SequenceParallelKind }>>();
  const add = (p: number, seq: number, kind: SequenceParallelKind) => {
    if (!plan.has(p)) plan.set(p, new Map());
    plan.get(p)!.set(rowKey(p, seq, kind), { seq, kind });
  };
  if (!f.skip.has("comm")) {
    for (const p of f.scaleRanks)
      for (const kind of KINDS) {
        add(p, f.weakPerRank * p, kind);
        add(p, f.strongSeq, kind);
      }
  }
  if (!f.skip.has("throughput") || !f.skip.has("projection")) for (const p of f.ranks) for (const seq of f.seqs) for (const kind of KINDS) add(p, seq, kind);
  if (!f.skip.has("projection")) for (const seq of f.calibrationSeqs) add(1, seq, "ulysses");
  if (!f.skip.has("maxseq")) for (const p of f.searchRanks) if (!plan.has(p)) plan.set(p, new Map());
  return new Map([...plan.entries()].sort((a, b) => a[0] - b[0]).map(([p, rows]) => [p, [...rows.values()].sort((a, b) => a.seq - b.seq)]));
}

export async function measureBlocks(f: PaperFlags, log: (line: string) => void): Promise<BlockMeasurements> {
  const out: BlockMeasurements = { rows: [], allToAll: [], maxSeq: [], worldRates: [] };
  const config = (kind: SequenceParallelKind): BlockConfig & { attention: SequenceParallelKind } => ({
    hidden: f.hidden,
    heads: f.heads,
    attention: kind,
    causal: true,
  });
  for (const [p, rows] of plannedRows(f)) {
    const world = await PaperWorld.start(p);
    try {
      const rateSeqs = f.skip.has("projection") ? [] : p === 1 ? f.calibrationSeqs : f.ranks.includes(p) ? f.seqs : [];
      const rates = rateSeqs.length > 0 ? await measureGemmRate(world, p, f, log) : null;
      if (rates !== null) out.worldRates.push(rates);
      for (const [i, { seq, kind }] of rows.entries()) {
        // The attention rate at N just before the rows at N: the same conditions on a shared machine.
        if (rates !== null && rateSeqs.includes(seq) && !rates.attention.some((a) => a.seq === seq))
          rates.attention.push(await measureAttentionRate(world, p, seq, f, log));
        // The first row of a world warms twice (JIT, ONNX Runtime arenas); every row reports the median of `timedSteps`
        // (the machine is shared), the P = 1 rows (the projection's calibration) the median of 5.
        const warmups = seq > f.warmupMaxSeq ? 0 : i === 0 ? 2 : 1;
        const row = await world.blockRow(config(kind), seq, { iters: p === 1 ? Math.max(5, f.timedSteps) : f.timedSteps, warmups, freshSessions: false });
        out.rows.push(row);
        log(`  P=${p} N=${seq} ${kind}: ${row.stepMs.toFixed(0)} ms${warmups > 0 ? "" : " (cold)"}, ${(row.stepBytes / 2 ** 20).toFixed(2)} MiB sent`);
      }
      if (p > 1 && !f.skip.has("projection")) {
        const bytes = (f.strongSeq / p) * 3 * f.hidden * 4; // the q, k, v exchange of the strong-scaling row
        const big = await world.allToAll(bytes, 5);
        const tiny = await world.allToAll(p * 16 * 4, 9);
        const loaded = await world.loadedLatency({ rows: 1024, hidden: f.hidden, iters: 16 });
        const rate = {
          ranks: p,
          bytes,
          seconds: big.seconds,
          bytesSent: big.bytesSent,
          bandwidthGBs: big.bytesSent / big.seconds / 1e9,
          latencyUs: loaded * 1e6,
          idleLatencyUs: tiny.seconds * 1e6,
        };
        out.allToAll.push(rate);
        log(
          `  P=${p} all-to-all ${(bytes / 2 ** 20).toFixed(1)} MiB per rank: ${(big.seconds * 1e3).toFixed(2)} ms, ${rate.bandwidthGBs.toFixed(2)} GB/s sent per rank; tiny: ${rate.idleLatencyUs.toFixed(0)} µs idle, ${rate.latencyUs.toFixed(0)} µs between GEMMs`,
        );
      }
      if (f.searchRanks.includes(p) && !f.skip.has("maxseq")) {
        for (const kind of KINDS) out.maxSeq.push(await searchMaxSeq(world, p, kind, config(kind), f, log));
      }
    } finally {
      await world.shutdown();
    }
  }
  return out;
}

async function measureGemmRate(world: PaperWorld, p: number, f: PaperFlags, log: (line: string) => void): Promise<WorldRates> {
  const gemmSeconds = await world.kernelSeconds("gemmRate", { rows: f.rateRows, hidden: f.hidden, repeats: 5 });
  const gemmGflops = blockGemmFlops(f.rateRows, f.hidden) / gemmSeconds / 1e9;
  log(`  P=${p} block GEMMs (${f.rateRows} rows) on every rank at once: ${gemmGflops.toFixed(1)} GFLOP/s per rank`);
  return { ranks: p, gemmRows: f.rateRows, gemmGflops, attention: [] };
}

async function measureAttentionRate(
  world: PaperWorld,
  p: number,
  seq: number,
  f: PaperFlags,
  log: (line: string) => void,
): Promise<WorldRates["attention"][number]> {
  const heads = Math.ceil(f.heads / p);
  const headDim = f.hidden / f.heads;
  const seconds = await world.kernelSeconds("attentionRate", { seq, heads, headDim, causal: true, repeats: 3 });
  const gflops = attentionFlops({ seq, width: heads * headDim, causal: true }, "training") / seconds / 1e9;
  log(`  P=${p} N=${seq} attention (${heads} heads) on every rank at once: ${gflops.toFixed(1)} useful GFLOP/s per rank`);
  return { seq, heads, seconds, gflops };
}

async function searchMaxSeq(
  world: PaperWorld,
  p: number,
  kind: SequenceParallelKind,
  config: BlockConfig & { attention: SequenceParallelKind },
  f: PaperFlags,
  log: (line: string) => void,
): Promise<MaxSeqResult> {
  const capBytes = f.capMiB * 2 ** 20;
  const probes: MaxSeqResult["probes"] = [];
  const accounts = new Map<number, MemoryAccount>();
  const search = await searchMaximum(
    async (seq) => {
      const row = await world.blockRow(config, seq, { iters: 0, warmups: 0, freshSessions: true });
      const ok = row.memory.peakBytes <= capBytes;
      probes.push({ seq, peakBytes: row.memory.peakBytes, ok, stepMs: row.stepMs });
      accounts.set(seq, row.memory);
      return ok;
    },
    f.searchStep * p,
    1 << 20,
  );
  log(
    `  P=${p} ${kind}: max N under ${f.capMiB} MiB/rank = ${search.best} (${probes.length} probes: ${probes.map((q) => `${q.seq}${q.ok ? "+" : "-"}`).join(" ")})`,
  );
  return { ranks: p, kind, capBytes, best: search.best, firstFailure: search.firstFailure, account: accounts.get(search.best) ?? null, probes };
}
