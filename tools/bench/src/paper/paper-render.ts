/**
 * paper.md of `bench:paper`, rendered from the measurements of one run (the
 * `PaperData` that paper.json records), with the projection check computed
 * from them: `pnpm bench:paper --rerender bench-results/paper.json` renders a
 * recorded run again (after a cost-model change) without measuring anything.
 */
import path from "node:path";
import type { MachineInfo } from "./machine-info.js";
import { describeMachine } from "./machine-info.js";
import type { BlockMeasurements } from "./measure-blocks.js";
import type { ConvergenceRun, KernelRates } from "./measure-children.js";
import { machineMatmulGflops, REPO_ROOT } from "./measure-children.js";
import type { PaperFlags } from "./paper-flags.js";
import { commTable, convergenceTable, maxSeqTable, projectionTable, throughputTable } from "./paper-tables.js";
import { mappingText, type ProjectionCheck } from "./projection-section.js";

/** Everything one run measured (paper.json holds it, with the flags as JSON). */
export interface PaperData {
  command: string;
  startedAt: string;
  seconds: number;
  machine: MachineInfo;
  rates: KernelRates;
  blocks: BlockMeasurements;
  convergence: ConvergenceRun[];
  cluster: { dir: string; files: string[] };
  failures: string[];
}

export function renderPaper(data: PaperData, f: PaperFlags, check: ProjectionCheck | null): string {
  const { rates, blocks, command, startedAt, seconds, cluster, failures } = data;
  const info = data.machine;
  const runs = data.convergence;
  const convergence = runs.length > 0 ? convergenceTable(runs) : null;
  const machine = describeMachine(info);
  const stamp = `Machine: ${machine}. Command: \`${command}\` (started ${startedAt}, ${seconds.toFixed(0)} s in all).`;
  const md: string[] = [
    "# DeepSpeed-Ulysses on this machine",
    "",
    stamp,
    "",
    `Model unit: one TransformerBlock (hidden ${f.hidden}, ${f.heads} heads of ${f.hidden / f.heads}, MLP 4h GELU, LayerNorm, causal, float32, batch 1), forward + backward with weight-gradient all-reduce, ` +
      `threads backend (ranks are worker threads sharing the ${info.cores} cores), ONNX Runtime kernels (OrtAttention), one ONNX Runtime thread per rank (P = 1 is therefore one core: the calibration configuration of section 5). ` +
      `Kernel rates measured in this run (before and after the block steps; the better of the two per rate): ONNX Runtime MatMul 2048^3 ${rates.matmulGflops.toFixed(1)} GFLOP/s with all ${rates.threads} cores, ${rates.matmulOneThreadGflops.toFixed(1)} with one thread; ` +
      `one thread: the block's forward GEMMs at ${rates.gemmRows} rows ${rates.gemmGflops.toFixed(1)}, causal attention forward+backward (OrtAttention, 2 heads of ${f.hidden / f.heads}) ${rates.attention.map((a) => `${a.gflops.toFixed(1)} useful GFLOP/s at N = ${a.seq}`).join(", ")}.`,
    "",
  ];
  if (!f.skip.has("comm")) {
    md.push(
      "## 1. Communication volume",
      "",
      stamp,
      "",
      "Bytes each rank sends in the attention collectives of one block step, from the collectives' own accounting (the busiest rank), next to the formulas " +
        "(Ulysses forward 4·(P−1)/P·(N/P)·H·D·4 bytes; all-gather-KV forward (P−1)·(N/P)·2·H·D·4; backward moves the same again). Weak scaling keeps N/P fixed; strong scaling keeps N fixed. " +
        "The weight-gradient all-reduce (the same for both schemes) is not included.",
      "",
      commTable(f, blocks.rows),
      "",
      "Chart: `paper-comm-weak.svg`.",
      "",
    );
  }
  if (!f.skip.has("throughput")) {
    md.push(
      "## 2. Throughput",
      "",
      stamp,
      "",
      `Tokens per second of one block step (forward + backward, the slowest rank's wall time) and model FLOPs utilisation = model FLOPs (3 x forward: 24·N·h² + 4·h per attended pair, N(N+1)/2 pairs causal; @ulysses/measure's count) / step time / ` +
        `the machine's ONNX Runtime MatMul 2048^3 rate measured in this run, the higher of all ${rates.threads} threads at once (${rates.matmulGflops.toFixed(1)}) and ${rates.threads} x one thread (${rates.matmulOneThreadGflops.toFixed(1)}): ${machineMatmulGflops(rates).toFixed(1)} GFLOP/s. Every row runs warm-up steps first (two in the first row of each world, one after); every row reports the median of ${f.timedSteps} timed steps` +
        `${f.warmupMaxSeq < Math.max(...f.seqs) ? `; rows with N > ${f.warmupMaxSeq} run no warm-up step` : ""}.`,
      "",
      throughputTable(f, blocks.rows, rates),
      "",
      "Chart: `paper-throughput.svg`.",
      "",
    );
  }
  if (!f.skip.has("maxseq")) {
    md.push(
      "## 3. Maximum sequence length",
      "",
      stamp,
      "",
      `The longest N (a multiple of ${f.searchStep}·P) for which one block step runs with every rank's allocation account at or under ${f.capMiB} MiB. ` +
        "Account (threads backend, per rank, the busiest rank): the float32 tensors alive at the end of the attention backward, each measured from the run: " +
        "the forward's saved context (`BlockContext.savedBytes`, holding the attention context), the largest attention-collective input and output buffers (the reused exchange buffers), " +
        "the local kernel's backward dOut, dq, dk, dv, the wrapper's returned dq, dk, dv, dy, and the weights with their gradients. " +
        "ONNX Runtime's internal per-run intermediates (O(128·keys) floats) and V8 objects are not counted. Each probe runs a real step; the search doubles N and then bisects.",
      "",
      maxSeqTable(f, blocks.maxSeq),
      "",
      "Chart: `paper-max-seq.svg`.",
      "",
    );
  }
  if (convergence !== null) {
    md.push(
      "## 4. Convergence",
      "",
      stamp,
      "",
      `The trainer CLI's default model and data (its settings: config.json in bench-results/paper-train/sp*/) for ${f.trainSteps} steps at SP = ${f.trainRanks.join(", ")} (same seed, same global batch). ` +
        `Commands: ${runs.map((r) => `\`${r.command}\``).join(", ")}. Max relative loss difference to SP = 1 over all steps: **${convergence.maxRelDiff.toExponential(2)}**.`,
      "",
      convergence.markdown,
      "",
      "Chart: `paper-convergence.svg` (the curves overlay).",
      "",
    );
  }
  if (check !== null) {
    const worst = Math.max(...check.rows.map((r) => Math.abs(r.errorPercent)));
    md.push(
      "## 5. Projection check",
      "",
      stamp,
      "",
      `The lead's cost model (tools/project, \`project(...)\`) predicts the Ulysses rows of section 2 at P >= 2 from profiles written by this run (${check.profileFiles.map((p) => `\`${p}\``).join(", ")}). ` +
        `${mappingText(info.cores)} Calibration, P = 1: ${check.calibrationPoints.map((p, i) => `N = ${p.seqLen}: step ${(p.seconds * 1000).toFixed(0)} ms, attention kernel ${p.attentionSeconds === undefined ? "?" : (p.attentionSeconds * 1000).toFixed(0)} ms, residual ${(check.calibration.residuals[i]! * 1000).toFixed(0)} ms`).join("; ")}; ` +
        `elementwiseNsByTokens ${check.calibration.elementwiseNsByTokens.map((r) => `${r.tokens}: ${r.nsPerTokenHidden.toFixed(1)}`).join(", ")}. ` +
        `Profiles: ${[["P=1 (one rank alone)", check.machine] as const, ...Object.entries(check.profiles).map(([p, hw]) => [`P=${p} (s = ${check.speeds[Number(p)]!.toFixed(3)})`, hw] as const)].map(([label, hw]) => `${label}: matmulEfficiency ${hw.matmulEfficiency.toFixed(3)}, attentionEfficiencyBySeq ${(hw.attentionEfficiencyBySeq ?? []).map((r) => `${r.seqLen}: ${r.efficiency.toFixed(3)}`).join(", ")}`).join("; ")} (peak ${(check.machine.peakTflops * 1000).toFixed(1)} GFLOP/s). ` +
        `All-to-all: ${Object.values(check.profiles)
          .map((p) => `P=${p.devicesPerNode} ${p.intraNode.bandwidthGBs.toFixed(2)} GB/s, ${p.intraNode.latencyUs.toFixed(0)} µs`)
          .join("; ")}. ` +
        `The all-gather-KV rows are not predicted (the cost model has Ulysses and Megatron-SP, not all-gather-KV). Largest |error|: **${worst.toFixed(1)}%**.`,
      "",
      projectionTable(check),
      "",
      "Chart: `paper-projection-check.svg`.",
      "",
    );
  }
  md.push(
    "## 6. Cluster projection (A100 profile)",
    "",
    `\`pnpm --filter @ulysses/project project\` (profile tools/project/profiles/a100-40gb-nvlink-ib.json, 32 and 64 devices), run by this suite; files in \`${path.relative(REPO_ROOT, cluster.dir)}/\`: ` +
      `${cluster.files.map((n) => `\`${n}\``).join(", ")}.`,
    "",
  );
  if (failures.length > 0) md.push("## Failed sections", "", ...failures.map((x) => `- ${x}`), "");
  return md.join("\n");
}
