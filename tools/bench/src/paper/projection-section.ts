/**
 * The projection check of `bench:paper`: turns this run's measurements into
 * hardware profiles (tools/project/profiles/this-machine*.json: kernel rates
 * measured on the ranks, see `mappingText`), calibrates the two fixed-cost
 * keys on P = 1 only, predicts the Ulysses throughput rows
 * at P >= 2 with the lead's cost model and reports predicted vs measured.
 */
import fs from "node:fs";
import path from "node:path";
import {
  calibrateFixedCosts,
  checkProjection,
  machineProfile,
  rankProfile,
  rankSpeed,
  type Calibration,
  type CalibrationPoint,
  type CheckRow,
  type GptShape,
  type HardwareProfile,
} from "@ulysses/project";
import type { BlockRow } from "./paper-world.js";
import type { AllToAllRate, WorldRates } from "./measure-blocks.js";
import type { KernelRates } from "./measure-children.js";
import type { MachineInfo } from "./machine-info.js";
import type { PaperFlags } from "./paper-flags.js";
import { REPO_ROOT } from "./measure-children.js";

export interface ProjectionCheck {
  model: GptShape;
  /** The one-core device (P = 1, one rank alone) with the calibrated fixed costs. */
  machine: HardwareProfile;
  calibration: Calibration;
  calibrationPoints: CalibrationPoint[];
  /** Per P: the rank's speed for the fixed costs (its GEMM rate with P ranks at once / one rank's alone, capped at 1). */
  speeds: Record<number, number>;
  profiles: Record<number, HardwareProfile>;
  profileFiles: string[];
  rows: CheckRow[];
  /** Per checked row: the slowest rank's time inside the attention kernel during the measured step, seconds (not used by the prediction). */
  measuredAttentionSeconds: number[];
}

export function blockShape(f: PaperFlags): GptShape {
  return {
    name: `TransformerBlock (hidden ${f.hidden}, ${f.heads} heads, MLP 4h, no vocabulary)`,
    layers: 1,
    hidden: f.hidden,
    heads: f.heads,
    vocab: 0,
    ffnMultiplier: 4,
  };
}

export function mappingText(cores: number): string {
  return (
    `Each rank is a device of a node of ${cores} cores. Its peak (peakTflops) is the highest one-thread rate measured in this run (ONNX Runtime's MatMul 2048^3 on one thread alone, or any kernel rate below): ` +
    `only a unit, so that every efficiency is at most 1; the prediction depends on the measured rates alone. ` +
    `its efficiencies come from the block's kernels timed on the P ranks themselves in this run, every rank running the kernel at once (a barrier before each repetition, the slowest rank's time) ` +
    `and separately from the block steps: matmulEfficiency = the block's forward GEMMs at its shapes (per rank) / peak; ` +
    `attentionEfficiencyBySeq = OrtAttention's causal forward+backward on the heads one rank holds (H at P = 1, H/P under Ulysses), useful rate per rank at each N / peak (interpolated in log2 N). ` +
    `So the cores' sharing (caches, memory bandwidth, SMT siblings, time-sharing when P > ${cores}) is measured, not assumed. ` +
    `The fixed costs are calibrated on ONE configuration, P = 1 (one rank alone): at each N of the P = 1 rows (the token counts per rank of the checked rows), ` +
    `step time minus the matmul term minus the time the step spent in its attention kernel, per token and hidden unit (elementwiseNsByTokens, interpolated in log2 of the tokens per rank; perLayerOverheadUs 0); ` +
    `at P >= 2 they are divided by the rank's speed s(P) = (GEMM rate per rank with P ranks at once) / (one rank's alone), capped at 1. ` +
    `Link: all ranks on one node, at the all-to-all bandwidth measured between P ranks in this run, and as latency what a tiny all-to-all adds when every rank runs a block GEMM (1024 rows) before each one ` +
    `(waiting for ranks the scheduler put aside included); q, k and v cross in one all-to-all, as @ulysses/block sends them. No step time at P >= 2 enters any profile.`
  );
}

export function runProjectionCheck(
  f: PaperFlags,
  info: MachineInfo,
  rates: KernelRates,
  rows: readonly BlockRow[],
  allToAll: readonly AllToAllRate[],
  worldRates: readonly WorldRates[],
  command: string,
): ProjectionCheck {
  const model = blockShape(f);
  const find = (p: number, seq: number) => rows.find((r) => r.ranks === p && r.seq === seq && r.kind === "ulysses");
  const points: CalibrationPoint[] = f.calibrationSeqs.map((seq) => {
    const r = find(1, seq);
    if (r === undefined) throw new Error(`projection check: no P = 1 row at N = ${seq} to calibrate on`);
    return { seqLen: seq, seconds: r.stepMs / 1000, ...(r.attentionKernelMs === undefined ? {} : { attentionSeconds: r.attentionKernelMs / 1000 }) };
  });
  const solo = worldRates.find((w) => w.ranks === 1);
  if (solo === undefined) throw new Error("projection check: no kernel rates measured in the P = 1 world");
  const describeRates = (w: WorldRates) =>
    `block GEMMs (${w.gemmRows} rows) ${w.gemmGflops.toFixed(1)} GFLOP/s per rank, attention (${w.attention[0]?.heads} heads) ${w.attention.map((a) => `N=${a.seq} ${a.gflops.toFixed(1)}`).join(", ")}`;
  const source =
    `Measured by '${command}' on ${new Date().toISOString().slice(0, 16)}Z: ${info.cores} cores (${info.cpuModel}), onnxruntime-node ${info.onnxruntime}, ` +
    `MatMul 2048^3 one thread alone ${rates.matmulOneThreadGflops.toFixed(1)} GFLOP/s; one rank alone: ${describeRates(solo)}. ${mappingText(info.cores)}`;
  const peak = Math.max(rates.matmulOneThreadGflops, ...worldRates.flatMap((w) => [w.gemmGflops, ...w.attention.map((a) => a.gflops)]));
  const base = machineProfile(
    {
      name: `this machine (one of ${info.cores} x ${info.cpuModel} cores)`,
      cores: info.cores,
      matmulGflops: peak,
      shapedMatmulGflops: solo.gemmGflops,
      attentionGflops: solo.attention.at(-1)!.gflops,
      attentionGflopsBySeq: solo.attention.map((a) => ({ seqLen: a.seq, gflops: a.gflops })),
      memoryGiB: info.memoryGiB,
    },
    source,
  );
  const calibration = calibrateFixedCosts(model, base, points);
  const machine: HardwareProfile = {
    ...base,
    elementwiseNsByTokens: calibration.elementwiseNsByTokens,
    source: `${source} Fixed costs from the P = 1 steps at N = ${points.map((p) => p.seqLen).join(", ")} (${points.map((p) => `${p.seconds.toFixed(3)} s, attention kernel ${p.attentionSeconds?.toFixed(3) ?? "?"} s`).join("; ")}).`,
  };
  const profiles: Record<number, HardwareProfile> = {};
  const speeds: Record<number, number> = {};
  for (const link of allToAll) {
    const w = worldRates.find((r) => r.ranks === link.ranks);
    if (w === undefined) continue;
    const rankRates = { shapedMatmulGflops: w.gemmGflops, attentionGflopsBySeq: w.attention.map((a) => ({ seqLen: a.seq, gflops: a.gflops })) };
    speeds[link.ranks] = rankSpeed(w.gemmGflops, solo.gemmGflops);
    const profile = rankProfile(machine, link.ranks, info.cores, { bandwidthGBs: link.bandwidthGBs, latencyUs: link.latencyUs }, rankRates, solo.gemmGflops);
    profile.source =
      `${machine.source} ${link.ranks} ranks at once: ${describeRates(w)}; s(${link.ranks}) = ${w.gemmGflops.toFixed(1)} / ${solo.gemmGflops.toFixed(1)} = ${speeds[link.ranks]!.toFixed(3)}. ` +
      `All-to-all between ${link.ranks} ranks: ${(link.bytes / 2 ** 20).toFixed(1)} MiB per rank in ${(link.seconds * 1e3).toFixed(2)} ms (${link.bandwidthGBs.toFixed(2)} GB/s sent per rank), 16 floats per peer in ${link.latencyUs.toFixed(0)} µs between block GEMMs (${link.idleLatencyUs?.toFixed(0) ?? "?"} µs between idle ranks).`;
    profiles[link.ranks] = profile;
  }
  const dir = path.join(REPO_ROOT, "tools/project/profiles");
  const profileFiles: string[] = [];
  const write = (name: string, profile: HardwareProfile) => {
    const file = path.join(dir, name);
    fs.writeFileSync(file, `${JSON.stringify(profile, null, 2)}\n`);
    profileFiles.push(path.relative(REPO_ROOT, file));
  };
  // this-machine.json: one rank alone (the calibration device), with the link measured between `cores` ranks.
  const nodeLink = allToAll.find((r) => r.ranks === info.cores) ?? allToAll[0];
  write(
    "this-machine.json",
    nodeLink === undefined
      ? machine
      : {
          ...machine,
          intraNode: { bandwidthGBs: nodeLink.bandwidthGBs, latencyUs: nodeLink.latencyUs },
          interNode: { bandwidthGBs: nodeLink.bandwidthGBs, latencyUs: nodeLink.latencyUs },
        },
  );
  for (const [p, profile] of Object.entries(profiles)) write(`this-machine-p${p}.json`, profile);
  const measuredRows = rows.filter(
    (r) => r.kind === "ulysses" && r.ranks > 1 && f.ranks.includes(r.ranks) && f.seqs.includes(r.seq) && profiles[r.ranks] !== undefined,
  );
  const measured = measuredRows.map((r) => ({ scheme: "ulysses" as const, degree: r.ranks, seqLen: r.seq, seconds: r.stepMs / 1000 }));
  const checked = checkProjection(model, measured, (p) => profiles[p]!);
  return {
    model,
    machine,
    calibration,
    calibrationPoints: points,
    speeds,
    profiles,
    profileFiles,
    rows: checked,
    measuredAttentionSeconds: measuredRows.map((r) => (r.attentionKernelMs ?? Number.NaN) / 1000),
  };
}
