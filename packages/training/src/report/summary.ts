/**
 * The final summary table printed (and saved as summary.txt) at the end of a
 * run: loss at the start and end, accuracy, throughput, compute/communication
 * split, memory and MFU, averaged over the steps of this run after warm-up.
 * The MFU is taken against the highest MatMul rate the run measured (at
 * start-up and at the end): a rate measured while the machine was busy is too
 * low a ceiling, and an MFU above 100% against it is reported as such, never
 * printed as a figure.
 */
import type { StepMetrics } from "./metrics-log.js";

function mean(values: readonly number[]): number {
  return values.length === 0 ? NaN : values.reduce((a, b) => a + b, 0) / values.length;
}

function bytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB"];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v.toFixed(u === 0 ? 0 : 1)} ${units[u]}`;
}

function percent(p: number): string {
  return `${(100 * p).toFixed(1)}%`;
}

export interface SummaryContext {
  setup: string;
  wallSeconds: number;
  outDir: string;
  /** Recall task: the accuracy of a random answer token. */
  chance?: number;
  /** Recall task: the best accuracy without the rank holding the facts (null: undefined for this layout). */
  withoutFacts?: number | null;
  /** The MatMul rate (FLOP/s) measured again at the end of the run, if it was. */
  matmulRateEnd?: number;
}

/** A MatMul rate in GFLOP/s, as the summary prints it. */
function gflops(rate: number): string {
  return (rate / 1e9).toFixed(1);
}

/** "102.1" or "98.0-102.1": the range of rates, GFLOP/s. */
function rateRange(rates: readonly number[]): string {
  const low = Math.min(...rates);
  const high = Math.max(...rates);
  return low === high ? gflops(high) : `${gflops(low)}-${gflops(high)}`;
}

/**
 * The MFU rows: the MatMul rates measured (the start-up rates the rows recorded, and the end's) and the mean MFU against the highest.
 * Rows without a recorded rate (written by older runs) keep their own MFU. Above 100% the MFU measures no use of the machine but a
 * rate measured under load: it is reported as n/a with the rates' range.
 */
export function mfuRows(sample: readonly StepMetrics[], matmulRateEnd?: number): [string, string][] {
  const usable = (r: number | undefined): r is number => r !== undefined && Number.isFinite(r) && r > 0;
  const starts = sample.map((m) => m.matmulRate).filter(usable);
  const all = usable(matmulRateEnd) ? [...starts, matmulRateEnd] : starts;
  const ceiling = Math.max(...all);
  const mfu = mean(sample.map((m) => (usable(m.matmulRate) ? (m.mfu * m.matmulRate) / ceiling : m.mfu)));
  const rows: [string, string][] = [];
  if (all.length > 0) {
    const measured = [starts.length > 0 ? `start-up ${rateRange(starts)}` : "", usable(matmulRateEnd) ? `end ${gflops(matmulRateEnd)}` : ""];
    rows.push(["ORT MatMul rate (GFLOP/s)", `${measured.filter((part) => part !== "").join(", ")}${new Set(all).size > 1 ? " (MFU vs the highest)" : ""}`]);
  }
  const value = mfu > 1 ? `n/a: the MatMul rate (${all.length > 0 ? rateRange(all) : "?"} GFLOP/s) was measured under load` : percent(mfu);
  rows.push(["MFU (vs ORT MatMul rate)", value]);
  return rows;
}

/** Rows of (name, value); steps after the first 10% (at least the first one) are averaged for timings; the loss and accuracy over the last 50 steps (at most a fifth of the run). */
export function summaryRows(metrics: readonly StepMetrics[], context: SummaryContext): [string, string][] {
  if (metrics.length === 0) return [["steps", "0"]];
  const first = metrics[0]!;
  const last = metrics[metrics.length - 1]!;
  const timed = metrics.slice(Math.max(1, Math.floor(metrics.length / 10)));
  const sample = timed.length > 0 ? timed : metrics;
  const tail = metrics.slice(-Math.max(1, Math.min(50, Math.floor(metrics.length / 5))));
  const rows: [string, string][] = [
    ["setup", context.setup],
    ["steps", `${first.step}..${last.step}`],
    ["loss first -> last", `${first.loss.toFixed(4)} -> ${last.loss.toFixed(4)}`],
    [`loss mean of last ${tail.length}`, mean(tail.map((m) => m.loss)).toFixed(4)],
  ];
  if (last.accuracy !== undefined) {
    rows.push([`accuracy mean of last ${tail.length}`, percent(mean(tail.map((m) => m.accuracy ?? 0)))]);
    if (context.chance !== undefined) rows.push(["chance (a random answer token)", percent(context.chance)]);
    if (context.withoutFacts !== undefined && context.withoutFacts !== null) rows.push(["best without the facts' rank", percent(context.withoutFacts)]);
  }
  const packed = metrics.filter((m) => m.documents !== undefined);
  if (packed.length > 0) {
    rows.push(
      ["documents per step (mean)", mean(packed.map((m) => m.documents!)).toFixed(1)],
      ["padding (mean)", `${(100 * mean(packed.map((m) => m.padding ?? 0))).toFixed(1)}% of tokens`],
    );
  }
  if (last.skippedDocuments !== undefined) rows.push(["bad documents skipped", String(last.skippedDocuments)]);
  const stepMs = mean(sample.map((m) => m.stepMs));
  const computeMs = mean(sample.map((m) => m.computeMs));
  const commMs = mean(sample.map((m) => m.commMs));
  rows.push(
    ["tokens/s", mean(sample.map((m) => m.tokensPerSec)).toFixed(0)],
    ["step time", `${stepMs.toFixed(1)} ms`],
    ["compute / comm per step", `${computeMs.toFixed(1)} ms / ${commMs.toFixed(1)} ms (${((100 * commMs) / Math.max(stepMs, 1e-9)).toFixed(1)}% comm)`],
    ["comm bytes per rank per step", bytes(mean(sample.map((m) => m.commBytesPerRank)))],
    ["peak RSS", bytes(Math.max(...metrics.map((m) => m.peakRssBytes)))],
    ...mfuRows(sample, context.matmulRateEnd),
    ["wall time", `${context.wallSeconds.toFixed(1)} s`],
    ["run directory", context.outDir],
  );
  return rows;
}

export function formatTable(rows: readonly [string, string][]): string {
  const w0 = Math.max(...rows.map(([k]) => k.length));
  const w1 = Math.max(...rows.map(([, v]) => v.length));
  const rule = `+${"-".repeat(w0 + 2)}+${"-".repeat(w1 + 2)}+`;
  return [rule, ...rows.map(([k, v]) => `| ${k.padEnd(w0)} | ${v.padEnd(w1)} |`), rule].join("\n");
}
