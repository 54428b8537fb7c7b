/**
 * `pnpm bench:schemes`' flags: the rows it can run, its --help text and the
 * parsing of its command line into the rows' specs.
 */
import { parallelDimsProblems, type ParallelDimsOptions } from "@ulysses/parallel";
import { parseFlags, positiveInteger, positiveIntegers, UsageError } from "./cli-flags.js";
import type { KernelKind, SchemeRow } from "./schemes-rank.js";

export const ROW_IDS = ["ulysses", "ring-contiguous", "ring-zigzag", "hybrid", "ring-zigzag-no-overlap", "hybrid-no-overlap"] as const;
export type RowId = (typeof ROW_IDS)[number];

export interface Flags {
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

export const HELP = `Usage: pnpm bench:schemes [flags]

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
export function rowSpecs(ids: readonly RowId[], p: number, u: number): SchemeRow[] {
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

export function dimsOptions(row: SchemeRow, p: number): ParallelDimsOptions {
  return {
    sp: p,
    attention: row.scheme,
    ...(row.scheme === "hybrid" ? { ulyssesDegree: row.u, ringDegree: p / row.u } : {}),
    layout: row.layout,
  };
}

export function parseSchemeFlags(argv: readonly string[]): Flags | null {
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
