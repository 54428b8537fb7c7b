/**
 * `pnpm bench:schemes` (issue 19): the sequence-parallel schemes side by side
 * on one causal TransformerBlock forward + backward per rank, P ranks on the
 * threads backend (one ONNX Runtime thread per rank by default), measured in
 * one run:
 *
 *   1. Ulysses over P ranks (kv heads replicated when P > kvHeads),
 *   2. ring, contiguous layout,
 *   3. ring, zigzag layout,
 *   4. hybrid u x r (Ulysses groups of u ranks, a ring of r = P / u groups), zigzag,
 *   5. ring zigzag and hybrid with `overlap: false`: transfers awaited before
 *      each compute, to measure what the overlap hides.
 *
 * Per row and N: the step time (median over the timed iterations of the
 * slowest rank's forward + backward, gradient all-reduce included), the
 * bytes each rank sent in the attention's collectives per step (the groups'
 * own stats summed over the SP group and the hybrid's subgroups; the
 * gradient all-reduce apart) checked against scheme-bytes.ts, and for ring
 * and hybrid rows each rank's ring compute and wait time
 * (RingAttention.stats) with the slowest / fastest compute ratio. The overlap
 * pairs give the transfer time (mean over ranks of waitMs without overlap)
 * and the fraction of it the overlap hides, two ways: (a) 1 − wait(overlap)
 * / wait(no overlap), (b) (step(no overlap) − step(overlap)) / wait(no
 * overlap). The rows' timed iterations are interleaved (iteration i of every
 * row, then i + 1), so load from other work slows every row alike.
 *
 * For a cost model, measured in the same run (every rank at once, after a
 * barrier): the local attention kernel's causal forward + backward rate per
 * rank at the ring's block size (N/P tokens, every head), the block's
 * forward GEMM rate per rank (N/P rows), and the ring's point-to-point
 * exchange (send to r + 1, receive from r − 1) time, bandwidth and latency.
 *
 * Writes bench-results/schemes/schemes.json and schemes.md. Exit status 1
 * when measured bytes differ from the formulas; the issue's targets are
 * printed as PASS/FAIL lines and do not change the exit status.
 * `--help` lists the flags; a bad flag or value exits 2 naming it.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { launch } from "@ulysses/collectives";
import { fusedAttentionStatus } from "@ulysses/fused-attention";
import { attentionFlops, medianOfSlowest } from "@ulysses/measure";
import {
  headRouting,
  hybridBytes,
  parallelDimsProblems,
  ringBytes,
  shardRuns,
  ulyssesBytes,
  type CallBytes,
  type ParallelDimsOptions,
} from "@ulysses/parallel";
import { parseFlags, positiveInteger, positiveIntegers, readCommandLine, UsageError } from "./cli-flags.js";
import { describeMachine, machineInfo } from "./paper/machine-info.js";
import { blockGemmFlops } from "./paper/block-gemm.js";
import type { AttentionRateArgs, BlockShape, KernelKind, RankSteps, SchemeRow, StepsArgs } from "./schemes-rank.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

const ROW_IDS = ["ulysses", "ring-contiguous", "ring-zigzag", "hybrid", "ring-zigzag-no-overlap", "hybrid-no-overlap"] as const;
type RowId = (typeof ROW_IDS)[number];

interface Flags {
  ranks: number;
  seqs: number[];
  iters: number;
  warmups: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  batch: number;
  ulyssesDegree: number;
  kernel: KernelKind;
  ortThreads: number;
  rows: RowId[];
  rates: boolean;
  rateRepeats: number;
}

const HELP = `Usage: pnpm bench:schemes [flags]

Ulysses, ring (contiguous, zigzag), hybrid Ulysses x ring and the ring without
overlap, on one causal TransformerBlock forward + backward per rank (threads
backend); step time, bytes per rank against the formulas, ring compute / wait
per rank, what the overlap hides, and the kernel and p2p rates of a cost model.
Writes bench-results/schemes/schemes.json and schemes.md.

  --ranks P               SP degree (default 4)
  --seq LIST              sequence lengths (default 8192,16384)
  --iters N               timed steps per row and N, median reported (default 2)
  --warmup N              untimed steps per row and N first (default 1; 0 allowed; a no-overlap
                          row shares its overlap twin's: same kernels, shapes and groups)
  --hidden N              model width (default 512; head dim = hidden / heads)
  --heads N --kv-heads N  query and key/value heads (default 8, 2)
  --batch N               sequences per step (default 1)
  --ulysses-degree U      the hybrid's Ulysses degree u (default 2; ring degree r = P / u)
  --kernel fused|ort      local attention kernel (default fused: the fused custom op; ort: ONNX graphs)
  --ort-threads N         ONNX Runtime / kernel threads per rank (default 1)
  --rows LIST             rows to run, of ${ROW_IDS.join(",")} (default all)
  --rate-repeats N        timed repetitions of each cost-model rate (default 2)
  --no-rates              skip the cost-model rates (kernel, GEMM, p2p)
  --help, -h              this text
`;

const FLAG_OPTIONS = {
  ranks: { type: "string" },
  seq: { type: "string" },
  iters: { type: "string" },
  warmup: { type: "string" },
  hidden: { type: "string" },
  heads: { type: "string" },
  "kv-heads": { type: "string" },
  batch: { type: "string" },
  "ulysses-degree": { type: "string" },
  kernel: { type: "string" },
  "ort-threads": { type: "string" },
  rows: { type: "string" },
  "rate-repeats": { type: "string" },
  "no-rates": { type: "boolean" },
} as const;

function nonNegativeInteger(flag: string, text: string): number {
  const n = Number(text);
  if (text.trim() === "" || !Number.isInteger(n) || n < 0) throw new UsageError(`${flag}: expected a non-negative integer, got '${text}'`);
  return n;
}

/** The rows of `ids` for P ranks and hybrid Ulysses degree u. */
function rowSpecs(ids: readonly RowId[], p: number, u: number): SchemeRow[] {
  const r = p / u;
  const spec: Record<RowId, SchemeRow> = {
    ulysses: { id: "ulysses", scheme: "ulysses", layout: "contiguous", u: p, r: 1, overlap: true },
    "ring-contiguous": { id: "ring-contiguous", scheme: "ring", layout: "contiguous", u: 1, r: p, overlap: true },
    "ring-zigzag": { id: "ring-zigzag", scheme: "ring", layout: "zigzag", u: 1, r: p, overlap: true },
    hybrid: { id: "hybrid", scheme: "hybrid", layout: "zigzag", u, r, overlap: true },
    "ring-zigzag-no-overlap": { id: "ring-zigzag-no-overlap", scheme: "ring", layout: "zigzag", u: 1, r: p, overlap: false },
    "hybrid-no-overlap": { id: "hybrid-no-overlap", scheme: "hybrid", layout: "zigzag", u, r, overlap: false },
  };
  return ids.map((id) => spec[id]);
}

function dimsOptions(row: SchemeRow, p: number): ParallelDimsOptions {
  return {
    sp: p,
    attention: row.scheme,
    ...(row.scheme === "hybrid" ? { ulyssesDegree: row.u, ringDegree: p / row.u } : {}),
    layout: row.layout,
  };
}

function parseSchemeFlags(argv: readonly string[]): Flags | null {
  const values = parseFlags("bench:schemes", argv, FLAG_OPTIONS);
  if (values === null) return null;
  const count = (flag: keyof typeof FLAG_OPTIONS, fallback: number) => {
    const text = values[flag];
    return typeof text === "string" ? positiveInteger(`--${flag}`, text) : fallback;
  };
  const kernel = values.kernel ?? "fused";
  if (kernel !== "fused" && kernel !== "ort") throw new UsageError(`--kernel: expected fused or ort, got '${kernel}'`);
  let rows: RowId[] = [...ROW_IDS];
  if (values.rows !== undefined) {
    const asked = values.rows.split(",").map((s) => s.trim());
    const unknown = asked.filter((id) => !(ROW_IDS as readonly string[]).includes(id));
    if (asked.length === 0 || unknown.length > 0 || values.rows.trim() === "")
      throw new UsageError(`--rows: unknown row '${unknown.join(",") || values.rows}' (rows: ${ROW_IDS.join(", ")})`);
    rows = ROW_IDS.filter((id) => asked.includes(id));
  }
  const f: Flags = {
    ranks: count("ranks", 4),
    seqs: values.seq === undefined ? [8192, 16384] : positiveIntegers("--seq", values.seq),
    iters: count("iters", 2),
    warmups: values.warmup === undefined ? 1 : nonNegativeInteger("--warmup", values.warmup),
    hidden: count("hidden", 512),
    heads: count("heads", 8),
    kvHeads: count("kv-heads", 2),
    batch: count("batch", 1),
    ulyssesDegree: count("ulysses-degree", 2),
    kernel,
    ortThreads: count("ort-threads", 1),
    rows,
    rates: values["no-rates"] !== true,
    rateRepeats: count("rate-repeats", 2),
  };
  if (f.hidden % f.heads !== 0) throw new UsageError(`--hidden ${f.hidden} must be a multiple of --heads ${f.heads} (head dim = hidden / heads)`);
  if (f.heads % f.kvHeads !== 0) throw new UsageError(`--heads ${f.heads} must be a multiple of --kv-heads ${f.kvHeads}`);
  const names = {
    sp: "--ranks",
    heads: "--heads",
    seqLength: "--seq",
    ulyssesDegree: "--ulysses-degree",
    ringDegree: "ring degree (--ranks / --ulysses-degree)",
  };
  // each problem once, with the rows it stops
  const problems = new Map<string, Set<string>>();
  for (const row of rowSpecs(f.rows, f.ranks, f.ulyssesDegree))
    for (const seq of f.seqs)
      for (const problem of parallelDimsProblems(
        dimsOptions(row, f.ranks),
        { worldSize: f.ranks, heads: f.heads, kvHeads: f.kvHeads, seqLength: seq },
        names,
      )) {
        if (!problems.has(problem)) problems.set(problem, new Set());
        problems.get(problem)!.add(row.id);
      }
  if (problems.size > 0) throw new UsageError(`bench:schemes: ${[...problems].map(([problem, ids]) => `${problem} (rows ${[...ids].join(", ")})`).join("; ")}`);
  return f;
}

/** One measured row at one N, as written to schemes.json. */
interface ResultRow {
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

function label(row: SchemeRow, kvHeads: number): string {
  const overlap = row.overlap ? "" : ", no overlap";
  if (row.scheme === "ulysses") return `Ulysses P=${row.u}${row.u > kvHeads ? ` (kv x${row.u / kvHeads})` : ""}`;
  if (row.scheme === "ring") return `ring ${row.layout}${overlap}`;
  return `hybrid ${row.u}x${row.r} ${row.layout}${overlap}`;
}

/** Bytes rank `rank` sends per attention call (forward + backward) under `row`, from scheme-bytes.ts. */
function expectedBytes(row: SchemeRow, f: Flags, n: number, rank: number): number {
  const p = f.ranks;
  const headDim = f.hidden / f.heads;
  const runs = shardRuns(n, p, row.layout, row.r);
  const sizes = runs.map((rs) => rs.reduce((a, run) => a + run.length, 0));
  const skipsFuture = row.layout === "contiguous"; // causal block
  let bytes: CallBytes;
  if (row.scheme === "ulysses") bytes = ulyssesBytes(headRouting(f.heads, f.kvHeads, p), sizes, rank, f.batch, headDim);
  else if (row.scheme === "ring") bytes = ringBytes(sizes, rank, skipsFuture, f.batch, f.kvHeads, headDim);
  else bytes = hybridBytes(headRouting(f.heads, f.kvHeads, row.u), sizes, rank, row.r, skipsFuture && row.r > 1, f.batch, headDim);
  return bytes.forward + bytes.backward;
}

/**
 * Causal (query, key) pairs × query heads each rank's ring computes (forward and backward alike), from
 * the layout: ring, a rank's own tokens; hybrid, its Ulysses group's tokens with its share of the heads.
 * Null for Ulysses. The ratio of its max to min is the imbalance the layout alone causes.
 */
function ringWork(row: SchemeRow, f: Flags, n: number): number[] | null {
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

function resultRow(row: SchemeRow, f: Flags, n: number, ranks: RankSteps[]): ResultRow {
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

interface OverlapPair {
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

interface Rates {
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

const mib = (b: number) => (b / 2 ** 20).toFixed(2);
const sec = (s: number) => s.toFixed(2);
const pct = (x: number) => `${(100 * x).toFixed(0)}%`;

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padStart(widths[i]!)).join(" | ")} |`;
  return [line(header), `|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`, ...rows.map(line)].join("\n");
}

/** Every rank's values "a/b/c/d" (or "-"). */
const perRankText = (xs: number[] | null, fmt: (x: number) => string) => (xs === null ? "-" : xs.map(fmt).join("/"));
const allSame = (xs: number[]) => xs.every((x) => x === xs[0]);

async function main(): Promise<void> {
  const f = readCommandLine(HELP, process.argv.slice(2), parseSchemeFlags);
  if (f.kernel === "fused") {
    const status = fusedAttentionStatus();
    if (!status.available) {
      process.stderr.write(`bench:schemes: --kernel fused: the fused attention addon is unavailable (${status.reason}); build it or pass --kernel ort\n`);
      process.exit(2);
    }
  }
  const started = performance.now();
  const machine = machineInfo();
  const date = new Date().toISOString();
  const specs = rowSpecs(f.rows, f.ranks, f.ulyssesDegree);
  const headDim = f.hidden / f.heads;
  const shape: BlockShape = { hidden: f.hidden, heads: f.heads, kvHeads: f.kvHeads, batch: f.batch };
  const elapsed = () => `${((performance.now() - started) / 1000).toFixed(0)} s`;
  console.error(
    `bench:schemes: P=${f.ranks}, N ${f.seqs.join(",")}, hidden ${f.hidden}, ${f.heads} heads / ${f.kvHeads} kv heads (head dim ${headDim}), batch ${f.batch}, ` +
      `kernel ${f.kernel}, ${f.ortThreads} thread(s) per rank, ${f.warmups} warm-up + ${f.iters} timed step(s) per row`,
  );

  const world = await launch<{
    steps(args: StepsArgs): Promise<RankSteps[]>;
    attentionRate(args: AttentionRateArgs): Promise<number[]>;
    gemmRate(args: { rows: number; hidden: number; repeats: number }): Promise<number[]>;
    p2p(args: { bytes: number; iters: number; rounds: number }): Promise<number[]>;
  }>({
    worldSize: f.ranks,
    entry: new URL("./schemes-rank.ts", import.meta.url),
    ortThreadsPerRank: f.ortThreads,
    timeoutMs: 900_000,
    args: { kernel: f.kernel },
  });
  const results: ResultRow[] = [];
  let rates: Rates | null = null;
  try {
    for (const n of f.seqs) {
      const perRank = await world.all("steps", { rows: specs, seq: n, block: shape, iters: f.iters, warmups: f.warmups });
      specs.forEach((row, i) => {
        const result = resultRow(
          row,
          f,
          n,
          perRank.map((r) => r[i]!),
        );
        results.push(result);
        console.error(
          `  N=${n} ${result.label}: ${sec(result.stepSeconds)} s` +
            (result.computeSecondsPerRank === null
              ? ""
              : ` (ring compute ${perRankText(result.computeSecondsPerRank, sec)} s, wait ${perRankText(result.waitSecondsPerRank, sec)} s)`),
        );
      });
      console.error(`  (N=${n} done at ${elapsed()})`);
    }
    if (f.rates) {
      const repeats = f.rateRepeats;
      const r: Rates = { attention: [], gemm: [], p2p: [], p2pLatencySeconds: 0, p2pBandwidthBytesPerSecond: 0 };
      for (const n of f.seqs) {
        const s = Math.floor(n / f.ranks);
        const args: AttentionRateArgs = { seqQ: s, seqK: s, heads: f.heads, kvHeads: f.kvHeads, headDim, batch: f.batch, causal: true, repeats };
        const seconds = medianOfSlowest(await world.all("attentionRate", args));
        const flops = f.batch * attentionFlops({ seq: s, width: f.heads * headDim, causal: true }, "training");
        r.attention.push({
          N: n,
          seqQ: s,
          seqK: s,
          heads: f.heads,
          kvHeads: f.kvHeads,
          headDim,
          causal: true,
          flops,
          seconds,
          gflopsPerRank: flops / seconds / 1e9,
        });
        const rows = f.batch * s;
        const gemmSeconds = medianOfSlowest(await world.all("gemmRate", { rows, hidden: f.hidden, repeats: Math.max(3, repeats) }));
        const gemmFlops = blockGemmFlops(rows, f.hidden);
        r.gemm.push({ N: n, rows, hidden: f.hidden, flops: gemmFlops, seconds: gemmSeconds, gflopsPerRank: gemmFlops / gemmSeconds / 1e9 });
        console.error(
          `  rates N=${n}: attention ${(flops / seconds / 1e9).toFixed(1)} GFLOP/s per rank, GEMM ${(gemmFlops / gemmSeconds / 1e9).toFixed(1)} GFLOP/s per rank (${elapsed()})`,
        );
      }
      // the ring's k (or v) block at each N, and a latency and a large size
      const blockBytes = f.seqs.map((n) => f.batch * Math.floor(n / f.ranks) * f.kvHeads * headDim * 4);
      const sizes = [...new Set([8, 64 * 1024, 2 ** 20, ...blockBytes, 8 * 2 ** 20])].sort((a, b) => a - b);
      for (const bytes of sizes) {
        const iters = Math.max(3, Math.min(200, Math.ceil((16 * 2 ** 20) / bytes)));
        const perRank = await world.all("p2p", { bytes, iters, rounds: 3 });
        // a round lasts as long as its slowest rank; the fastest round counts (other work only slows rounds down)
        const rounds = perRank[0]!.map((_, i) => Math.max(...perRank.map((times) => times[i]!)));
        const seconds = Math.min(...rounds);
        r.p2p.push({ bytes, iters, seconds, gbPerSecondPerRank: bytes / seconds / 1e9 });
      }
      const first = r.p2p[0]!;
      const last = r.p2p[r.p2p.length - 1]!;
      r.p2pLatencySeconds = first.seconds;
      r.p2pBandwidthBytesPerSecond = (last.bytes - first.bytes) / (last.seconds - first.seconds);
      rates = r;
      console.error(`  p2p done (${elapsed()})`);
    }
  } finally {
    await world.shutdown();
  }

  const find = (id: RowId, n: number) => results.find((r) => r.id === id && r.N === n);
  const pairs: OverlapPair[] = [];
  for (const n of f.seqs) {
    for (const [on, off, scheme] of [
      ["ring-zigzag", "ring-zigzag-no-overlap", "ring"],
      ["hybrid", "hybrid-no-overlap", "hybrid"],
    ] as const) {
      const a = find(on, n);
      const b = find(off, n);
      if (a === undefined || b === undefined) continue;
      const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;
      const transfer = mean(b.waitSecondsPerRank!);
      const waitOverlap = mean(a.waitSecondsPerRank!);
      pairs.push({
        scheme,
        label: a.label,
        N: n,
        stepSecondsOverlap: a.stepSeconds,
        stepSecondsNoOverlap: b.stepSeconds,
        transferSeconds: transfer,
        waitSecondsOverlap: waitOverlap,
        hiddenByWait: 1 - waitOverlap / transfer,
        hiddenByStep: (b.stepSeconds - a.stepSeconds) / transfer,
      });
    }
  }

  // targets of issue 19, measured above
  const targets: { target: string; N: number; value: string; pass: boolean | null }[] = [];
  for (const n of f.seqs) {
    const u = find("ulysses", n);
    const h = find("hybrid", n);
    targets.push(
      u !== undefined && h !== undefined
        ? {
            target: `hybrid ${h.u}x${h.r} sends fewer bytes per rank than ${u.label}`,
            N: n,
            value: `${mib(Math.max(...h.bytesPerRank))} MiB < ${mib(Math.max(...u.bytesPerRank))} MiB`,
            pass: Math.max(...h.bytesPerRank) < Math.max(...u.bytesPerRank),
          }
        : { target: "hybrid sends fewer bytes per rank than Ulysses with replication", N: n, value: "rows not measured", pass: null },
    );
    const z = find("ring-zigzag", n);
    targets.push(
      z?.computeRatio != null
        ? { target: "ring zigzag slowest / fastest rank compute time <= 1.15", N: n, value: z.computeRatio.toFixed(2), pass: z.computeRatio <= 1.15 }
        : { target: "ring zigzag slowest / fastest rank compute time <= 1.15", N: n, value: "row not measured", pass: null },
    );
    const c = find("ring-contiguous", n);
    targets.push(
      c?.computeRatio != null
        ? { target: "ring contiguous slowest / fastest rank compute time >= 1.8", N: n, value: c.computeRatio.toFixed(2), pass: c.computeRatio >= 1.8 }
        : { target: "ring contiguous slowest / fastest rank compute time >= 1.8", N: n, value: "row not measured", pass: null },
    );
    const ring = pairs.find((p) => p.scheme === "ring" && p.N === n);
    for (const [way, pick] of [
      ["(a) 1 - wait(overlap)/wait(no overlap)", (p: OverlapPair) => p.hiddenByWait],
      ["(b) (step(no overlap) - step(overlap))/wait(no overlap)", (p: OverlapPair) => p.hiddenByStep],
    ] as const) {
      targets.push(
        ring !== undefined
          ? { target: `overlap hides >= 50% of the ring's transfer time, ${way}`, N: n, value: pct(pick(ring)), pass: pick(ring) >= 0.5 }
          : { target: `overlap hides >= 50% of the ring's transfer time, ${way}`, N: n, value: "rows not measured", pass: null },
      );
    }
  }

  machine.loadAfter = (await import("node:os")).loadavg();
  const heading = `Sequence-parallel schemes: one causal TransformerBlock forward+backward, P=${f.ranks} ranks (threads backend, ${f.ortThreads} kernel thread(s) per rank), hidden ${f.hidden}, ${f.heads} heads, ${f.kvHeads} kv heads, head dim ${headDim}, batch ${f.batch}, attention kernel ${f.kernel}`;
  const stepTable = table(
    [
      "row",
      "N",
      "step s",
      "attn MiB/rank",
      "formula MiB/rank",
      "bytes",
      "ring compute s per rank",
      "ring wait s per rank",
      "compute max/min",
      "work max/min",
      "grad MiB/rank",
    ],
    results.map((r) => [
      r.label,
      String(r.N),
      sec(r.stepSeconds),
      allSame(r.bytesPerRank) ? mib(r.bytesPerRank[0]!) : r.bytesPerRank.map(mib).join("/"),
      allSame(r.expectedBytesPerRank) ? mib(r.expectedBytesPerRank[0]!) : r.expectedBytesPerRank.map(mib).join("/"),
      r.bytesMatch ? "OK" : "MISMATCH",
      perRankText(r.computeSecondsPerRank, sec),
      perRankText(r.waitSecondsPerRank, sec),
      r.computeRatio === null ? "-" : r.computeRatio.toFixed(2),
      r.workRatio === null ? "-" : r.workRatio.toFixed(2),
      mib(r.gradBytesPerRank[0]!),
    ]),
  );
  const overlapTable = table(
    ["pair", "N", "step s (overlap)", "step s (no overlap)", "transfer s (wait, no overlap)", "wait s (overlap)", "hidden (a)", "hidden (b)"],
    pairs.map((p) => [
      p.label,
      String(p.N),
      sec(p.stepSecondsOverlap),
      sec(p.stepSecondsNoOverlap),
      sec(p.transferSeconds),
      sec(p.waitSecondsOverlap),
      pct(p.hiddenByWait),
      pct(p.hiddenByStep),
    ]),
  );
  const targetLines = targets.map((t) => `${t.pass === null ? "SKIP" : t.pass ? "PASS" : "FAIL"}  N=${t.N}  ${t.target}: ${t.value}`);
  const rateTables =
    rates === null
      ? []
      : [
          table(
            ["kernel", "N", "shape", "GFLOP/s per rank", "s per call"],
            [
              ...rates.attention.map((a) => [
                `attention ${f.kernel} causal fwd+bwd`,
                String(a.N),
                `[${f.batch}, ${a.seqQ}, ${a.heads}/${a.kvHeads}, ${a.headDim}]`,
                a.gflopsPerRank.toFixed(1),
                a.seconds.toFixed(3),
              ]),
              ...rates.gemm.map((g) => [`block forward GEMMs`, String(g.N), `${g.rows} rows x ${g.hidden}`, g.gflopsPerRank.toFixed(1), g.seconds.toFixed(3)]),
            ],
          ),
          table(
            ["p2p message", "exchanges per round", "ms per exchange", "GB/s per rank"],
            rates.p2p.map((p) => [
              p.bytes < 1024 ? `${p.bytes} B` : `${(p.bytes / 1024).toFixed(0)} KiB`,
              String(p.iters),
              (p.seconds * 1000).toFixed(3),
              p.gbPerSecondPerRank.toFixed(2),
            ]),
          ),
          `p2p latency ${(rates.p2pLatencySeconds * 1e6).toFixed(0)} us, bandwidth ${(rates.p2pBandwidthBytesPerSecond / 1e9).toFixed(2)} GB/s per rank (slope between ${first8(rates)} and the largest message)`,
        ];
  const notes = [
    "step = median over the timed iterations of the slowest rank's forward + backward (gradient all-reduce included); attn MiB = bytes each rank sent in the attention's collectives per step, summed over the SP group and the hybrid's Ulysses and ring groups (the gradient all-reduce apart, grad MiB); formula = scheme-bytes.ts.",
    "ring compute / wait = RingAttention.stats per rank (rank order) in the median iteration: wall time inside local kernel calls / awaiting k, v (dk, dv) transfers; with more ranks than cores it includes time a rank's kernel thread waits for a core. work max/min = the layout's own imbalance (causal pairs x heads per rank's ring).",
    "hidden (a) = 1 - mean wait(overlap) / mean wait(no overlap); hidden (b) = (step(no overlap) - step(overlap)) / mean wait(no overlap).",
    `cost-model rates: every rank at once after a barrier (${f.ranks} ranks sharing ${machine.cores} cores); attention at the ring's block size N/P, GEMMs = the block's forward GEMMs (24 rows h^2 FLOPs) on N/P rows; p2p = every rank sends one message to r+1 and receives one from r-1 (the ring's round), fastest of 3 rounds.`,
  ];
  const output = [
    "",
    heading,
    `machine: ${describeMachine(machine)}`,
    "",
    stepTable,
    "",
    "Overlap of the ring's transfers with its compute",
    overlapTable,
    "",
    ...rateTables.flatMap((t) => [t, ""]),
    ...notes,
    "",
    "Targets (issue 19), measured in this run:",
    ...targetLines,
  ].join("\n");
  console.log(output);

  const mismatched = results.filter((r) => !r.bytesMatch);
  for (const r of mismatched)
    console.log(`BYTES DIFFER from the formula: ${r.label} N=${r.N}: [${r.bytesPerRank.join(", ")}] != [${r.expectedBytesPerRank.join(", ")}]`);

  const outDir = fileURLToPath(new URL("../../../bench-results/schemes/", import.meta.url));
  mkdirSync(outDir, { recursive: true });
  const totalSeconds = (performance.now() - started) / 1000;
  writeFileSync(
    `${outDir}schemes.json`,
    `${JSON.stringify(
      {
        bench: "schemes",
        machine: {
          cpuModel: machine.cpuModel,
          cores: machine.cores,
          memoryGiB: machine.memoryGiB,
          date,
          node: machine.node,
          onnxruntime: machine.onnxruntime,
          loadBefore: machine.loadBefore,
          loadAfter: machine.loadAfter,
        },
        flags: f,
        totalSeconds,
        rows: results,
        overlap: pairs,
        rates,
        targets,
      },
      null,
      2,
    )}\n`,
  );
  const md = [
    "# bench:schemes",
    "",
    `${heading}.`,
    "",
    `Machine: ${describeMachine(machine)}. Date ${date}. Run time ${totalSeconds.toFixed(0)} s.`,
    "",
    stepTable,
    "",
    "## Overlap of the ring's transfers with its compute",
    "",
    overlapTable,
    "",
    ...(rateTables.length > 0 ? ["## Cost-model rates", "", ...rateTables.flatMap((t) => [t, ""])] : []),
    "## Notes",
    "",
    ...notes.map((n) => `- ${n}`),
    "",
    "## Targets (issue 19)",
    "",
    ...targetLines.map((l) => `- ${l}`),
    "",
  ].join("\n");
  writeFileSync(`${outDir}schemes.md`, md);
  console.log(`\nwrote ${outDir}schemes.json and schemes.md (${totalSeconds.toFixed(0)} s)`);
  if (mismatched.length > 0) process.exitCode = 1;
}

function first8(r: Rates): string {
  const b = r.p2p[0]!.bytes;
  return b < 1024 ? `${b} B` : `${(b / 1024).toFixed(0)} KiB`;
}

await main();
