/**
 * The markdown tables of `bench:paper` (paper.md), one function per section,
 * from the measurements and the formulas (labelled as such). Charts are
 * paper-charts.ts's.
 */
import { gptTrainingFlops } from "@ulysses/measure";
import { gptDimensionsOf } from "@ulysses/project";
import type { SequenceParallelKind } from "@ulysses/parallel";
import { blockShape, type ProjectionCheck } from "./projection-section.js";
import type { BlockRow } from "./paper-world.js";
import type { MaxSeqResult } from "./measure-blocks.js";
import type { ConvergenceRun, KernelRates } from "./measure-children.js";
import { machineMatmulGflops, maxRelativeDifference } from "./measure-children.js";
import type { PaperFlags } from "./paper-flags.js";

export function table(header: string[], rows: string[][]): string {
  const line = (cells: string[]) => `| ${cells.join(" | ")} |`;
  return [line(header), line(header.map(() => "---:")), ...rows.map(line)].join("\n");
}

const MiB = (bytes: number) => (bytes / 2 ** 20).toFixed(2);
const NAMES: Record<SequenceParallelKind, string> = { ulysses: "Ulysses", allgather: "all-gather-KV", ring: "ring", hybrid: "hybrid Ulysses x ring" };

/** Forward bytes per rank per block from the formulas (b = 1, MHA, N divisible by P). */
export function formulaForwardBytes(kind: SequenceParallelKind, p: number, n: number, f: PaperFlags): number {
  const d = f.hidden / f.heads;
  if (kind === "ulysses") return (4 * (p - 1) * (n / p) * f.heads * d * 4) / p;
  return (p - 1) * (n / p) * 2 * f.heads * d * 4;
}

export function commTable(f: PaperFlags, rows: readonly BlockRow[]): string {
  const get = (p: number, n: number, kind: SequenceParallelKind) => rows.find((r) => r.ranks === p && r.seq === n && r.kind === kind);
  const body: string[][] = [];
  const scalings = [
    { name: "weak", seq: (p: number) => f.weakPerRank * p },
    { name: "strong", seq: () => f.strongSeq },
  ];
  for (const s of scalings) {
    for (const p of f.scaleRanks) {
      const n = s.seq(p);
      const u = get(p, n, "ulysses");
      const a = get(p, n, "allgather");
      if (u === undefined || a === undefined) continue;
      const fu = formulaForwardBytes("ulysses", p, n, f);
      const fa = formulaForwardBytes("allgather", p, n, f);
      body.push([
        s.name,
        String(p),
        String(n),
        String(n / p),
        MiB(u.forwardBytes),
        MiB(fu),
        MiB(a.forwardBytes),
        MiB(fa),
        MiB(u.stepBytes),
        MiB(a.stepBytes),
        u.stepBytes === 0 ? "-" : (a.stepBytes / u.stepBytes).toFixed(2),
        String(u.forwardBytes === fu && a.forwardBytes === fa && u.stepBytes === 2 * fu && a.stepBytes === 2 * fa),
      ]);
    }
  }
  return table(
    [
      "scaling",
      "P",
      "N",
      "N/P",
      "U fwd MiB (measured)",
      "U fwd MiB (formula)",
      "AG fwd MiB (measured)",
      "AG fwd MiB (formula)",
      "U fwd+bwd MiB",
      "AG fwd+bwd MiB",
      "AG/U",
      "measured = formula",
    ],
    body,
  );
}

/** Model FLOPs of one block step: 3 x forward, causal attention over its N(N+1)/2 pairs (the cost model's count). */
export function blockStepFlops(f: PaperFlags, seq: number): number {
  return gptTrainingFlops(gptDimensionsOf(blockShape(f)), seq, true);
}

export function throughputTable(f: PaperFlags, rows: readonly BlockRow[], rates: KernelRates): string {
  const body: string[][] = [];
  for (const p of f.ranks) {
    for (const n of f.seqs) {
      for (const kind of ["ulysses", "allgather"] as const) {
        const r = rows.find((x) => x.ranks === p && x.seq === n && x.kind === kind);
        if (r === undefined) continue;
        const seconds = r.stepMs / 1000;
        const mfu = blockStepFlops(f, n) / seconds / (machineMatmulGflops(rates) * 1e9);
        body.push([
          String(p),
          String(n),
          NAMES[kind],
          r.stepMs.toFixed(0),
          (n / seconds).toFixed(0),
          (100 * mfu).toFixed(1),
          r.commMs.toFixed(0),
          MiB(r.stepBytes),
          `${r.warmups > 0 ? "warm" : "no warm-up"}, ${r.iters === 1 ? "1 step" : `median of ${r.iters}`}`,
        ]);
      }
    }
  }
  return table(["P", "N", "scheme", "step ms", "tokens/s", "MFU %", "comm ms (mean/rank)", "attn MiB sent/rank", "timing"], body);
}

export function maxSeqTable(f: PaperFlags, results: readonly MaxSeqResult[]): string {
  const body: string[][] = [];
  for (const p of f.searchRanks) {
    const u = results.find((r) => r.ranks === p && r.kind === "ulysses");
    const a = results.find((r) => r.ranks === p && r.kind === "allgather");
    if (u === undefined || a === undefined) continue;
    const peak = (r: MaxSeqResult) => (r.account === null ? "-" : MiB(r.account.peakBytes));
    const parts = (r: MaxSeqResult) =>
      r.account === null
        ? "-"
        : `${MiB(r.account.savedBytes)} / ${MiB(r.account.exchangeBytes)} / ${MiB(r.account.kernelBackwardBytes + r.account.attentionGradientBytes)}`;
    body.push([
      String(p),
      String(u.best),
      String(a.best),
      a.best === 0 ? "-" : (u.best / a.best).toFixed(2),
      peak(u),
      peak(a),
      parts(u),
      parts(a),
      `${u.probes.length} + ${a.probes.length}`,
    ]);
  }
  return table(
    [
      "P",
      "Ulysses max N",
      "all-gather-KV max N",
      "U/AG",
      "U peak MiB/rank",
      "AG peak MiB/rank",
      "U saved / exchange / attn grads MiB",
      "AG saved / exchange / attn grads MiB",
      "probes (U + AG)",
    ],
    body,
  );
}

export function convergenceTable(runs: readonly ConvergenceRun[]): { markdown: string; maxRelDiff: number } {
  const reference = runs.find((r) => r.sp === 1) ?? runs[0]!;
  let worst = 0;
  const body = runs.map((r) => {
    const diff = maxRelativeDifference(reference.losses, r.losses);
    worst = Math.max(worst, diff);
    return [
      String(r.sp),
      String(r.losses.length),
      r.losses[0]!.toFixed(6),
      r.losses.at(-1)!.toFixed(6),
      diff.toExponential(2),
      r.tokensPerSec.toFixed(0),
      r.wallSeconds.toFixed(0),
    ];
  });
  return { markdown: table(["SP", "steps", "first loss", "last loss", "max rel. diff vs SP=1", "tokens/s", "wall s"], body), maxRelDiff: worst };
}

export function projectionTable(check: ProjectionCheck): string {
  const ms = (s: number) => (s * 1000).toFixed(0);
  return table(
    [
      "P",
      "N",
      "measured ms",
      "predicted ms",
      "error %",
      "matmul ms",
      "attention ms",
      "fixed ms",
      "all-to-all ms",
      "attention kernel in the step ms (measured, not used)",
    ],
    check.rows.map((r, i) => [
      String(r.degree),
      String(r.seqLen),
      ms(r.seconds),
      ms(r.predictedSeconds),
      `${r.errorPercent >= 0 ? "+" : ""}${r.errorPercent.toFixed(1)}`,
      ms(r.terms.matmul),
      ms(r.terms.attention),
      ms(r.terms.fixed),
      ms(r.terms.communication),
      Number.isFinite(check.measuredAttentionSeconds[i]) ? ms(check.measuredAttentionSeconds[i]!) : "-",
    ]),
  );
}
