/**
 * The SVG charts of `bench:paper`, drawn with @ulysses/measure's
 * `lineChart`: communication volume (weak scaling), throughput against N,
 * maximum sequence length against P, the loss curves at SP = 1, 2, 4, and the
 * projection check (predicted against measured step times).
 */
import { lineChart, type Series } from "@ulysses/measure";
import type { SequenceParallelKind } from "@ulysses/parallel";
import type { BlockRow } from "./paper-world.js";
import type { MaxSeqResult } from "./measure-blocks.js";
import type { ConvergenceRun } from "./measure-children.js";
import type { PaperFlags } from "./paper-flags.js";
import type { ProjectionCheck } from "./projection-section.js";
import { formulaForwardBytes } from "./paper-tables.js";

const KINDS: { kind: SequenceParallelKind; name: string }[] = [
  { kind: "ulysses", name: "Ulysses" },
  { kind: "allgather", name: "all-gather-KV" },
];
const kFormat = (x: number) => (x >= 1024 ? `${x / 1024}K` : String(x));

export function paperCharts(
  f: PaperFlags,
  rows: readonly BlockRow[],
  maxSeq: readonly MaxSeqResult[],
  runs: readonly ConvergenceRun[],
  check: ProjectionCheck | null,
): Record<string, string> {
  const charts: Record<string, string> = {};
  const get = (p: number, n: number, kind: SequenceParallelKind) => rows.find((r) => r.ranks === p && r.seq === n && r.kind === kind);
  if (!f.skip.has("comm")) {
    const series: Series[] = KINDS.flatMap(({ kind, name }) => [
      { name: `${name} measured`, points: f.scaleRanks.map((p) => ({ x: p, y: (get(p, f.weakPerRank * p, kind)?.forwardBytes ?? NaN) / 2 ** 20 })) },
      { name: `${name} formula`, dash: "6 3", points: f.scaleRanks.map((p) => ({ x: p, y: formulaForwardBytes(kind, p, f.weakPerRank * p, f) / 2 ** 20 })) },
    ]);
    charts["paper-comm-weak.svg"] = lineChart(series, {
      title: `Bytes sent per rank per block forward, N/P = ${f.weakPerRank}`,
      xLabel: "P (ranks)",
      yLabel: "MiB",
      logX: true,
    });
  }
  if (!f.skip.has("throughput")) {
    const series: Series[] = f.ranks.flatMap((p) =>
      KINDS.map(({ kind, name }) => ({
        name: `${name} P=${p}`,
        dash: kind === "allgather" ? "6 3" : undefined,
        points: f.seqs.map((n) => ({ x: n, y: ((r) => (r === undefined ? null : n / (r.stepMs / 1000)))(get(p, n, kind)) })),
      })),
    );
    charts["paper-throughput.svg"] = lineChart(series, {
      title: `Block forward+backward throughput (hidden ${f.hidden}, ${f.heads} heads)`,
      xLabel: "sequence length N",
      yLabel: "tokens/s",
      logX: true,
      formatX: kFormat,
    });
  }
  if (!f.skip.has("maxseq") && maxSeq.length > 0) {
    const series: Series[] = KINDS.map(({ kind, name }) => ({
      name,
      points: f.searchRanks.map((p) => ({ x: p, y: maxSeq.find((m) => m.ranks === p && m.kind === kind)?.best ?? null })),
    }));
    charts["paper-max-seq.svg"] = lineChart(series, {
      title: `Longest N under ${f.capMiB} MiB per rank (one block step)`,
      xLabel: "P (ranks)",
      yLabel: "tokens",
      logX: true,
    });
  }
  if (!f.skip.has("convergence") && runs.length > 0) {
    const series: Series[] = runs.map((r, i) => ({
      name: `SP=${r.sp}`,
      dash: i === 0 ? undefined : ["6 3", "2 3", "8 2 2 2"][(i - 1) % 3],
      points: r.losses.map((y, x) => ({ x: x + 1, y })),
    }));
    charts["paper-convergence.svg"] = lineChart(series, { title: "Training loss, default model, same seed and global batch", xLabel: "step", yLabel: "loss" });
  }
  if (check !== null && check.rows.length > 0) {
    const degrees = [...new Set(check.rows.map((r) => r.degree))];
    const series: Series[] = degrees.flatMap((p) => {
      const mine = check.rows.filter((r) => r.degree === p);
      return [
        { name: `measured P=${p}`, points: mine.map((r) => ({ x: r.seqLen, y: r.seconds })) },
        { name: `predicted P=${p}`, dash: "6 3", points: mine.map((r) => ({ x: r.seqLen, y: r.predictedSeconds })) },
      ];
    });
    charts["paper-projection-check.svg"] = lineChart(series, {
      title: "Ulysses block step: cost model vs measurement",
      xLabel: "sequence length N",
      yLabel: "seconds",
      logX: true,
      formatX: kFormat,
    });
  }
  return charts;
}
