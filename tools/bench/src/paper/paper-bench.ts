/**
 * `pnpm bench:paper`: reproduces DeepSpeed-Ulysses' claims with this
 * project's own system on this machine and checks the cluster projection
 * against the measurements of the same run. Sections: communication volume
 * (weak and strong scaling, measured bytes next to the formulas), throughput
 * and MFU (Ulysses vs the all-gather-KV baseline), maximum sequence length
 * under a per-rank memory cap, convergence at SP = 1, 2, 4, the projection
 * check, and the A100 cluster projection. Writes bench-results/paper.md,
 * paper.json and paper-*.svg, and tools/project/profiles/this-machine*.json.
 * Never part of `test`. Flags: see paper-flags.ts (`--help`).
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describeMachine, machineInfo } from "./machine-info.js";
import { measureBlocks, type BlockMeasurements } from "./measure-blocks.js";
import { measureConvergence, measureKernelRates, REPO_ROOT, runClusterProjection, type ConvergenceRun } from "./measure-children.js";
import { paperCharts } from "./paper-charts.js";
import { PAPER_HELP, parsePaperFlags } from "./paper-flags.js";
import { commTable, convergenceTable, maxSeqTable, projectionTable, throughputTable } from "./paper-tables.js";
import { mappingText, runProjectionCheck, type ProjectionCheck } from "./projection-section.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

async function main(): Promise<void> {
  const argv = process.argv.slice(2).filter((a) => a !== "--");
  const f = parsePaperFlags(argv);
  if (f === null) {
    process.stdout.write(PAPER_HELP);
    return;
  }
  const command = `pnpm bench:paper${argv.length > 0 ? ` ${argv.join(" ")}` : ""}`;
  const outDir = path.resolve(REPO_ROOT, f.out ?? "bench-results");
  fs.mkdirSync(outDir, { recursive: true });
  const started = performance.now();
  const startedAt = new Date().toISOString();
  const info = machineInfo();
  const log = (line: string) => process.stderr.write(`${line}\n`);
  log(`bench:paper${f.quick ? " --quick" : ""}: ${describeMachine(info)}`);

  log("kernel rates:");
  const rates = await measureKernelRates(f, log);
  log("block steps (threads backend):");
  const blocks: BlockMeasurements = await measureBlocks(f, log);
  // The later sections fail on their own: a failure is reported in paper.md and the exit code, the rest still runs.
  const failures: string[] = [];
  const attempt = async <T>(section: string, fn: () => Promise<T> | T): Promise<T | null> => {
    try {
      return await fn();
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      failures.push(`${section}: ${message.split("\n").filter((l) => l.trim() !== "").slice(0, 4).join(" / ")}`);
      log(`${section} FAILED: ${message}`);
      return null;
    }
  };
  let runs: ConvergenceRun[] = [];
  if (!f.skip.has("convergence")) {
    log("convergence (trainer CLI):");
    runs = (await attempt("convergence", () => measureConvergence(f, outDir, log))) ?? [];
  }
  let check: ProjectionCheck | null = null;
  if (!f.skip.has("projection")) check = await attempt("projection check", () => runProjectionCheck(f, info, rates, blocks.rows, blocks.allToAll, command));
  log("cluster projection (A100 profile, 32 and 64 devices):");
  const cluster = (await attempt("cluster projection", () => runClusterProjection(outDir))) ?? { dir: path.join(outDir, "project"), files: [] };
  info.loadAfter = os.loadavg();
  const seconds = (performance.now() - started) / 1000;

  const charts = paperCharts(f, blocks.rows, blocks.maxSeq, runs, check);
  for (const [name, svg] of Object.entries(charts)) fs.writeFileSync(path.join(outDir, name), svg);
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
      `Kernel rates measured in this run: ONNX Runtime MatMul 2048^3 ${rates.matmulGflops.toFixed(1)} GFLOP/s with all ${rates.threads} cores, ${rates.matmulOneThreadGflops.toFixed(1)} with one thread; ` +
      `one thread: the block's forward GEMMs at ${rates.gemmRows} rows ${rates.gemmGflops.toFixed(1)}, causal attention forward+backward (OrtAttention, ${f.heads} heads of ${f.hidden / f.heads}) ${rates.attention.map((a) => `${a.gflops.toFixed(1)} useful GFLOP/s at N = ${a.seq}`).join(", ")}; ` +
      `its N² term (t = A·N² + B·N through both points) ${rates.attentionGflops.toFixed(1)} GFLOP/s.`,
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
      `Tokens per second of one block step (forward + backward, the slowest rank's wall time) and model FLOPs utilisation = model FLOPs (3 x forward: 24·N·h² + 4·N²·h with causal attention at half) / step time / ` +
        `the ONNX Runtime MatMul 2048^3 rate with all cores measured in this run (${rates.matmulGflops.toFixed(1)} GFLOP/s). Rows with N <= ${f.warmupMaxSeq} time the second step (warm); longer rows time the first (cold: session creation included).`,
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
      `The trainer CLI's default model (recall task, seq 256, 2 layers, hidden 64, 4 heads, batch 8, seed 1234) for ${f.trainSteps} steps at SP = ${f.trainRanks.join(", ")} (same seed, same global batch). ` +
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
        `${mappingText(info.cores)} Calibrated on ONE configuration, P = 1 (N = ${check.calibrationPoints.map((p) => `${p.seqLen}: ${(p.seconds * 1000).toFixed(0)} ms`).join(", ")}): ` +
        `elementwiseNsPerTokenHidden = ${check.calibration.elementwiseNsPerTokenHidden.toFixed(3)}, perLayerOverheadUs = ${check.calibration.perLayerOverheadUs.toFixed(0)}. ` +
        `Machine profile: peak ${(check.machine.peakTflops * 1000).toFixed(1)} GFLOP/s, matmulEfficiency ${check.machine.matmulEfficiency.toFixed(3)}, attentionEfficiency ${check.machine.attentionEfficiency.toFixed(3)}. ` +
        `All-to-all: ${Object.values(check.profiles).map((p) => `P=${p.devicesPerNode} ${p.intraNode.bandwidthGBs.toFixed(2)} GB/s, ${p.intraNode.latencyUs.toFixed(0)} µs`).join("; ")}. ` +
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
  const mdFile = path.join(outDir, "paper.md");
  fs.writeFileSync(mdFile, md.join("\n"));
  const json = { failures, command, startedAt, seconds, machine: info, flags: { ...f, skip: [...f.skip] }, rates, blocks, convergence: runs, projectionCheck: check, cluster, charts: Object.keys(charts) };
  fs.writeFileSync(path.join(outDir, "paper.json"), `${JSON.stringify(json, null, 2)}\n`);
  process.stdout.write(`${md.join("\n")}\n`);
  log(`wrote ${path.relative(process.cwd(), mdFile)}, paper.json and ${Object.keys(charts).length} charts in ${seconds.toFixed(0)} s`);
  if (failures.length > 0) {
    log(`${failures.length} section(s) failed:\n${failures.join("\n")}`);
    process.exitCode = 1;
  }
}

main().then(
  () => process.exit(process.exitCode ?? 0),
  (error: unknown) => {
    process.stderr.write(`bench:paper failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
