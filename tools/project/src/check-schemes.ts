/**
 * The measured-vs-predicted check of the sequence-parallel schemes on one
 * machine: `bench:schemes` (tools/bench) times one transformer block's
 * forward + backward (causal) under Ulysses, ring and hybrid attention and
 * writes the rows and the machine profile it measured to
 * bench-results/schemes/schemes.json; this module predicts every row with
 * the cost model and reports the error in step time and in bytes sent.
 * Arithmetic only: the measuring is the caller's.
 */
import { matmulFlopsPerToken, TRAINING_PASSES } from "@ulysses/measure";
import { project, type GptShape, type RunShape, type Scheme } from "./cost-model.js";
import { parseProfile, ProjectionError, type HardwareProfile } from "./profile.js";
import { ringPairsPerRank, type RingLayout } from "./sp-cost.js";

/** One measured configuration: one block's forward + backward, causal. */
export interface SchemeRow {
  scheme: Exclude<Scheme, "megatron">;
  layout: RingLayout;
  /** Ranks. */
  P: number;
  /** Ulysses degree. */
  u: number;
  /** Ring degree. */
  r: number;
  /** Sequence length. */
  N: number;
  heads: number;
  kvHeads: number;
  hidden: number;
  headDim: number;
  batch: number;
  /** Measured step (the slowest rank's forward + backward of the block), seconds. */
  stepSeconds: number;
  /** Measured bytes one rank sent in the step (all-to-all plus ring); per rank as an array (bench:schemes), the busiest rank's is compared. */
  bytesPerRank: number | number[];
  /** Whether the ring posted the next block's transfer before computing the current one. */
  overlap: boolean;
}

export interface SchemeCheckRow extends Omit<SchemeRow, "bytesPerRank"> {
  /** The busiest rank's measured bytes (the largest of a per-rank array). */
  bytesPerRank: number;
  predictedSeconds: number;
  /** (predicted − measured) / measured, percent. */
  errorPercent: number;
  predictedBytes: number;
  /** (predicted − measured) / measured bytes, percent (0 when both are 0). */
  bytesErrorPercent: number;
  /** The prediction's terms, seconds: matmul, attention (busiest rank), fixed costs, all-to-all, ring transfer not hidden by compute. */
  terms: { matmul: number; attention: number; fixed: number; allToAll: number; ringExposed: number };
}

export interface SchemeCheckOptions {
  /** q, k and v in one all-to-all (as @ulysses/block sends them); default true. Changes latencies only. */
  fusedQkv?: boolean;
  /** Cores the P ranks shared (bench:schemes' machine.cores); fewer than P: the uneven-layout correction above. */
  cores?: number;
}

/** The block as the cost model sees it: one layer, no vocabulary, MLP 4h. */
export function schemeBlock(row: Pick<SchemeRow, "heads" | "kvHeads" | "hidden">): GptShape {
  return {
    name: `block h${row.hidden} H${row.heads}/${row.kvHeads}`,
    layers: 1,
    hidden: row.hidden,
    heads: row.heads,
    kvHeads: row.kvHeads,
    vocab: 0,
    ffnMultiplier: 4,
  };
}

function checkRow(row: SchemeRow, i: number): void {
  const where = `schemes row ${i} (${row.scheme}, P ${row.P}, u ${row.u}, r ${row.r}, N ${row.N})`;
  if (!["ulysses", "ring", "hybrid"].includes(row.scheme)) throw new ProjectionError(`${where}: scheme must be ulysses, ring or hybrid, got '${row.scheme}'`);
  for (const key of ["P", "u", "r", "N", "heads", "kvHeads", "hidden", "headDim", "batch"] as const) {
    const v = row[key];
    if (!Number.isInteger(v) || v < 1) throw new ProjectionError(`${where}: '${key}' must be a positive integer, got ${JSON.stringify(v)}`);
  }
  if (typeof row.stepSeconds !== "number" || !Number.isFinite(row.stepSeconds) || row.stepSeconds <= 0) {
    throw new ProjectionError(`${where}: 'stepSeconds' must be a positive number, got ${JSON.stringify(row.stepSeconds)}`);
  }
  const bytes = Array.isArray(row.bytesPerRank) ? row.bytesPerRank : [row.bytesPerRank];
  if (bytes.length === 0 || bytes.some((b) => typeof b !== "number" || !Number.isFinite(b) || b < 0)) {
    throw new ProjectionError(`${where}: 'bytesPerRank' must be a non-negative number or an array of them, got ${JSON.stringify(row.bytesPerRank)}`);
  }
  if (row.u * row.r !== row.P) throw new ProjectionError(`${where}: u × r = ${row.u * row.r}, not P = ${row.P}`);
  if (row.scheme === "ulysses" && row.r !== 1) throw new ProjectionError(`${where}: a ulysses row has r = 1, got r = ${row.r}`);
  if (row.scheme === "ring" && row.u !== 1) throw new ProjectionError(`${where}: a ring row has u = 1, got u = ${row.u}`);
  if (row.headDim * row.heads !== row.hidden) {
    throw new ProjectionError(
      `${where}: headDim ${row.headDim} × heads ${row.heads} = ${row.headDim * row.heads}, not hidden ${row.hidden} (the cost model takes D = hidden / heads)`,
    );
  }
  if (row.layout !== "zigzag" && row.layout !== "contiguous") throw new ProjectionError(`${where}: layout must be zigzag or contiguous, got '${row.layout}'`);
  if (typeof row.overlap !== "boolean") throw new ProjectionError(`${where}: 'overlap' must be true or false, got ${JSON.stringify(row.overlap)}`);
}

/** The run of one row: P ranks of one group, micro-batch `batch`, no ZeRO, no checkpointing, causal. */
export function schemeRun(row: SchemeRow, options: SchemeCheckOptions = {}): RunShape {
  return {
    scheme: row.scheme,
    devices: row.P,
    degree: row.P,
    ...(row.scheme === "hybrid" ? { ulyssesDegree: row.u, ringDegree: row.r } : {}),
    layout: row.layout,
    overlapRingTransfer: row.overlap,
    seqLen: row.N,
    microBatch: row.batch,
    globalBatchTokens: row.batch * row.N,
    zeroStage: 0,
    activationCheckpointing: false,
    causal: true,
    fusedQkv: options.fusedQkv !== false,
  };
}

/**
 * Predicts each row's step (compute + SP communication of one micro-step;
 * the weight-gradient reduction, which a block step does not run, left out)
 * and bytes with `profile`, and reports the errors.
 */
export function checkSchemes(rows: readonly SchemeRow[], profile: HardwareProfile, options: SchemeCheckOptions = {}): SchemeCheckRow[] {
  return rows.map((row, i) => {
    checkRow(row, i);
    const p = project(schemeBlock(row), schemeRun(row, options), profile);
    const sp = p.sequenceParallel!;
    // More ranks than cores: the measured rates are per rank with every rank busy; once the lighter ranks of an
    // uneven layout finish, the scheduler gives their cores to the busy ones, so the attention takes
    // max(busiest / (rate x P / cores), total / (rate x P)) instead of busiest / rate.
    const cores = options.cores;
    let attention = sp.attentionSeconds;
    if (cores !== undefined && cores < row.P) {
      const work = ringPairsPerRank(row.N, row.r, true, row.layout);
      const busiest = Math.max(...work);
      const total = (work.reduce((a, w) => a + w, 0) * row.P) / row.r;
      attention = sp.attentionSeconds * Math.max(cores / row.P, total / (busiest * row.P));
    }
    const predictedSeconds = p.computeSeconds - sp.attentionSeconds + attention + p.parallelCommSeconds;
    const tokens = row.batch * (row.N / row.P);
    // forward + backward (3 passes) of the block's matrices: @ulysses/measure's count of one layer without vocabulary
    const matmulFlops =
      TRAINING_PASSES *
      tokens *
      matmulFlopsPerToken({ layers: 1, hidden: row.hidden, kvWidth: row.kvHeads * row.headDim, vocab: 0, mlpHidden: 4 * row.hidden });
    const matmul = matmulFlops / (profile.peakTflops * 1e12 * profile.matmulEfficiency);
    const bytes = p.parallelBytesPerDevice;
    const measuredBytes = Array.isArray(row.bytesPerRank) ? Math.max(...row.bytesPerRank) : row.bytesPerRank;
    return {
      ...row,
      bytesPerRank: measuredBytes,
      predictedSeconds,
      errorPercent: (100 * (predictedSeconds - row.stepSeconds)) / row.stepSeconds,
      predictedBytes: bytes,
      bytesErrorPercent: measuredBytes === 0 ? (bytes === 0 ? 0 : Infinity) : (100 * (bytes - measuredBytes)) / measuredBytes,
      terms: {
        matmul,
        attention,
        fixed: p.computeSeconds - matmul - sp.attentionSeconds,
        allToAll: sp.allToAllSeconds,
        ringExposed: sp.ringExposedSeconds,
      },
    };
  });
}

const PROFILE_KEYS = ["peakTflops", "matmulEfficiency", "attentionEfficiency", "devicesPerNode", "intraNode"];

/** The cost-model rates bench:schemes measures on the ranks (its `rates`): attention and GEMM GFLOP/s per rank, point-to-point latency and bandwidth. */
export interface SchemeRates {
  /** Attention forward + backward per rank at key length seqK, GFLOP/s under @ulysses/measure's count (4·width per attended pair forward, 8 backward). */
  attention: { seqK: number; gflopsPerRank: number }[];
  /** The block's GEMMs per rank, GFLOP/s. */
  gemm: { gflopsPerRank: number }[];
  p2pLatencySeconds: number;
  p2pBandwidthBytesPerSecond: number;
}

/**
 * A profile from bench:schemes' measured rates: peak = the highest measured
 * rate (a unit, as machineProfile's), matmulEfficiency = the median GEMM rate
 * / peak, attentionEfficiencyBySeq = the attention rates by key length (mean
 * where several) / peak, both links = the measured point-to-point bandwidth
 * and latency. What the rates do not measure (fixed costs, memory, bytes per
 * element, devices per node) comes from `base` (the machine's --profile)
 * when given, else: no fixed costs, 4 bytes (fp32), one node of `ranks`.
 */
export function profileFromRates(rates: SchemeRates, ranks: number, base?: HardwareProfile, where = "rates"): HardwareProfile {
  const rate = (v: unknown, name: string) => {
    if (typeof v !== "number" || !Number.isFinite(v) || v <= 0)
      throw new ProjectionError(`${where}: ${name} must be a positive measured number, got ${JSON.stringify(v)}`);
    return v;
  };
  if (!Array.isArray(rates.gemm) || rates.gemm.length === 0) throw new ProjectionError(`${where}: 'gemm' must list at least one measured GEMM rate`);
  if (!Array.isArray(rates.attention) || rates.attention.length === 0) throw new ProjectionError(`${where}: 'attention' must list at least one measured rate`);
  const gemm = rates.gemm.map((g, i) => rate(g.gflopsPerRank, `gemm[${i}].gflopsPerRank`)).sort((a, b) => a - b);
  const bySeq = new Map<number, number[]>();
  rates.attention.forEach((a, i) =>
    bySeq.set(rate(a.seqK, `attention[${i}].seqK`), [...(bySeq.get(a.seqK) ?? []), rate(a.gflopsPerRank, `attention[${i}].gflopsPerRank`)]),
  );
  const attention = [...bySeq].map(([seqLen, xs]) => ({ seqLen, gflops: xs.reduce((a, b) => a + b, 0) / xs.length })).sort((a, b) => a.seqLen - b.seqLen);
  const peak = Math.max(...gemm, ...attention.map((a) => a.gflops));
  const median = gemm.length % 2 === 1 ? gemm[(gemm.length - 1) / 2]! : (gemm[gemm.length / 2 - 1]! + gemm[gemm.length / 2]!) / 2;
  const link = {
    bandwidthGBs: rate(rates.p2pBandwidthBytesPerSecond, "p2pBandwidthBytesPerSecond") / 1e9,
    latencyUs: Math.max(0, rates.p2pLatencySeconds) * 1e6,
  };
  return parseProfile(
    {
      name: `bench:schemes rates${base === undefined ? "" : ` over ${base.name}`}`,
      source: `peak = highest measured rate ${peak.toFixed(1)} GFLOP/s (a unit); GEMM median ${median.toFixed(1)} GFLOP/s; attention by key length; p2p ${link.bandwidthGBs.toFixed(2)} GB/s, ${link.latencyUs.toFixed(0)} us`,
      devicesPerNode: Math.max(ranks, base?.devicesPerNode ?? 1),
      peakTflops: peak / 1000,
      matmulEfficiency: median / peak,
      attentionEfficiency: attention.at(-1)!.gflops / peak,
      attentionEfficiencyBySeq: attention.map((a) => ({ seqLen: a.seqLen, efficiency: a.gflops / peak })),
      memoryGiB: base?.memoryGiB ?? 1024,
      bytesPerElement: base?.bytesPerElement ?? 4,
      intraNode: link,
      interNode: link,
      elementwiseNsPerTokenHidden: base?.elementwiseNsPerTokenHidden ?? 0,
      perLayerOverheadUs: base?.perLayerOverheadUs ?? 0,
      ...(base?.elementwiseNsByTokens === undefined ? {} : { elementwiseNsByTokens: base.elementwiseNsByTokens }),
    },
    where,
  );
}

/**
 * Reads bench:schemes' JSON: `{ rows: [...], profile: {...} }`, or the rows
 * with the profile's keys beside them (`{ rows, name, peakTflops, ... }`), or
 * the rows with bench:schemes' measured `rates` (returned as `rates`, for
 * `profileFromRates`), or a bare array of rows (then the profile comes from
 * elsewhere). Other keys (machine, flags, targets, ...) are ignored.
 */
export function parseSchemesFile(json: unknown, where = "schemes.json"): { rows: SchemeRow[]; profile?: HardwareProfile; rates?: SchemeRates; cores?: number } {
  if (Array.isArray(json)) return { rows: json as SchemeRow[] };
  if (typeof json !== "object" || json === null) throw new ProjectionError(`${where}: expected an object with 'rows' (and a profile) or an array of rows`);
  const o = json as Record<string, unknown>;
  if (!Array.isArray(o.rows)) throw new ProjectionError(`${where}: 'rows' must be an array of scheme rows, got ${JSON.stringify(o.rows)?.slice(0, 80)}`);
  const rows = o.rows as SchemeRow[];
  const machine = o.machine as { cores?: unknown } | undefined;
  const cores = typeof machine?.cores === "number" && Number.isInteger(machine.cores) && machine.cores > 0 ? { cores: machine.cores } : {};
  if (o.profile !== undefined) return { rows, profile: parseProfile(o.profile, `${where} profile`), ...cores };
  if (PROFILE_KEYS.some((k) => k in o)) {
    const { rows: _rows, ...fields } = o;
    return { rows, profile: parseProfile({ name: "bench:schemes machine", ...fields }, `${where} (profile keys beside the rows)`), ...cores };
  }
  if (typeof o.rates === "object" && o.rates !== null) return { rows, rates: o.rates as SchemeRates, ...cores };
  return { rows, ...cores };
}

const ms = (s: number) => (s * 1e3).toFixed(1);
const mib = (b: number) => (b / 2 ** 20).toFixed(2);
const pct = (x: number) => (Number.isFinite(x) ? `${x >= 0 ? "+" : ""}${x.toFixed(1)}%` : "n/a");

/** The check as a markdown table. */
export function schemesCheckMarkdown(rows: readonly SchemeCheckRow[], profile: HardwareProfile): string {
  const lines = [
    `# Sequence-parallel schemes: measured vs predicted (${profile.name})`,
    "",
    'One block\'s forward + backward, causal; predicted = compute + SP communication of one micro-step (tools/project/README.md, "Ring and hybrid").',
    "",
    "| scheme | layout | P | u | r | N | measured ms | predicted ms | error | matmul | attention | fixed | all-to-all | ring exposed | MiB/rank measured | predicted | error |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
  ];
  for (const r of rows) {
    const t = r.terms;
    lines.push(
      `| ${r.scheme} | ${r.layout}${r.overlap ? "" : " (no overlap)"} | ${r.P} | ${r.u} | ${r.r} | ${r.N} | ${ms(r.stepSeconds)} | ${ms(r.predictedSeconds)} | ${pct(r.errorPercent)} | ` +
        `${ms(t.matmul)} | ${ms(t.attention)} | ${ms(t.fixed)} | ${ms(t.allToAll)} | ${ms(t.ringExposed)} | ${mib(r.bytesPerRank)} | ${mib(r.predictedBytes)} | ${pct(r.bytesErrorPercent)} |`,
    );
  }
  const errors = rows.map((r) => Math.abs(r.errorPercent));
  if (rows.length > 0)
    lines.push("", `Rows: ${rows.length}; within 20%: ${errors.filter((e) => e <= 20).length}; worst |error| ${Math.max(...errors).toFixed(1)}%.`);
  return lines.join("\n");
}
