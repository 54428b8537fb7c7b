/**
 * The projection check of `bench:paper`: turns this run's measurements into
 * hardware profiles (tools/project/profiles/this-machine*.json), calibrates
 * the two fixed-cost keys on P = 1 only, predicts the Ulysses throughput rows
 * at P >= 2 with the lead's cost model and reports predicted vs measured.
 */
import fs from "node:fs";
import path from "node:path";
import {
  calibrateFixedCosts,
  checkProjection,
  machineProfile,
  rankProfile,
  type Calibration,
  type CheckRow,
  type GptShape,
  type HardwareProfile,
} from "../../../project/src/index.js";
import type { BlockRow } from "./paper-world.js";
import type { AllToAllRate } from "./measure-blocks.js";
import type { KernelRates } from "./measure-children.js";
import type { MachineInfo } from "./machine-info.js";
import type { PaperFlags } from "./paper-flags.js";
import { REPO_ROOT } from "./measure-children.js";

export interface ProjectionCheck {
  model: GptShape;
  /** A thread's speed with every core busy relative to alone (from the two MatMul rates). */
  shared: number;
  machine: HardwareProfile;
  calibration: Calibration;
  calibrationPoints: { seqLen: number; seconds: number }[];
  profiles: Record<number, HardwareProfile>;
  profileFiles: string[];
  rows: CheckRow[];
}

export function blockShape(f: PaperFlags): GptShape {
  return { name: `TransformerBlock (hidden ${f.hidden}, ${f.heads} heads, MLP 4h, no vocabulary)`, layers: 1, hidden: f.hidden, heads: f.heads, vocab: 0, ffnMultiplier: 4 };
}

export function mappingText(cores: number): string {
  return (
    `This machine is one node of ${cores} devices, each device one core: peakTflops = the ONNX Runtime MatMul 2048^3 rate of one thread ` +
    `(the machine rate is ${cores} times that); matmulEfficiency = (the block's forward GEMMs at its shapes, one thread) / that rate; ` +
    `attentionEfficiencyBySeq = (OrtAttention's causal forward+backward useful rate on one thread, measured at each listed N) / that rate ` +
    `(its tiling follows the key length, so its efficiency varies with N; interpolated in log2 N); ` +
    `elementwiseNsPerTokenHidden and perLayerOverheadUs calibrated on one configuration, P = 1 (one rank, one ONNX Runtime thread: one device), at two sequence lengths. ` +
    `Every rank runs one ONNX Runtime thread. When all ${cores} cores are busy a thread keeps shared = (MatMul rate with ${cores} threads) / (${cores} x the one-thread rate) of its solo speed ` +
    `(shared caches and memory bandwidth, SMT siblings on a VM); P > ${cores} ranks time-share the cores. A rank's speed is s(P) = shared x min(1, ${cores}/P) for P >= ${cores} ` +
    `(so its peak is the machine rate / P) and 1 at P = 1; its device has peak x s(P) and fixed costs / s(P). ` +
    `Link: all ranks on one node, at the all-to-all bandwidth and latency measured between P ranks in this run.`
  );
}

export function runProjectionCheck(
  f: PaperFlags,
  info: MachineInfo,
  rates: KernelRates,
  rows: readonly BlockRow[],
  allToAll: readonly AllToAllRate[],
  command: string,
): ProjectionCheck {
  const model = blockShape(f);
  const find = (p: number, seq: number) => rows.find((r) => r.ranks === p && r.seq === seq && r.kind === "ulysses");
  const points = f.calibrationSeqs.map((seq) => {
    const r = find(1, seq);
    if (r === undefined) throw new Error(`projection check: no P = 1 row at N = ${seq} to calibrate on`);
    return { seqLen: seq, seconds: r.stepMs / 1000 };
  }) as [{ seqLen: number; seconds: number }, { seqLen: number; seconds: number }];
  const source =
    `Measured by '${command}' on ${new Date().toISOString().slice(0, 16)}Z: ${info.cores} cores (${info.cpuModel}), onnxruntime-node ${info.onnxruntime}, ` +
    `one thread: MatMul 2048^3 ${rates.matmulOneThreadGflops.toFixed(1)} GFLOP/s, block GEMMs (${rates.gemmRows} rows) ${rates.gemmGflops.toFixed(1)}, ` +
    `attention (2 heads) ${rates.attention.map((a) => `N=${a.seq} ${a.gflops.toFixed(1)}`).join(", ")}. ${mappingText(info.cores)}`;
  const base = machineProfile(
    { name: `this machine (one of ${info.cores} x ${info.cpuModel} cores)`, cores: info.cores, matmulGflops: rates.matmulOneThreadGflops, shapedMatmulGflops: rates.gemmGflops, attentionGflops: rates.attentionGflops, attentionGflopsBySeq: rates.attention.map((a) => ({ seqLen: a.seq, gflops: a.gflops })), memoryGiB: info.memoryGiB },
    source,
  );
  const calibration = calibrateFixedCosts(model, base, points);
  const machine: HardwareProfile = {
    ...base,
    elementwiseNsPerTokenHidden: calibration.elementwiseNsPerTokenHidden,
    perLayerOverheadUs: calibration.perLayerOverheadUs,
    source: `${source} Fixed costs from P = 1 at N = ${points.map((p) => p.seqLen).join(" and ")} (${points.map((p) => `${p.seconds.toFixed(3)} s`).join(", ")}).`,
  };
  const shared = Math.min(1, rates.matmulGflops / (info.cores * rates.matmulOneThreadGflops));
  const profiles: Record<number, HardwareProfile> = {};
  for (const rate of allToAll) {
    profiles[rate.ranks] = rankProfile(machine, rate.ranks, info.cores, { bandwidthGBs: rate.bandwidthGBs, latencyUs: rate.latencyUs }, shared);
    profiles[rate.ranks]!.source = `${machine.source} shared = ${rates.matmulGflops.toFixed(1)} / (${info.cores} x ${rates.matmulOneThreadGflops.toFixed(1)}) = ${shared.toFixed(3)}. All-to-all between ${rate.ranks} ranks: ${(rate.bytes / 2 ** 20).toFixed(1)} MiB per rank in ${(rate.seconds * 1e3).toFixed(2)} ms (${rate.bandwidthGBs.toFixed(2)} GB/s sent per rank), 16 floats per peer in ${rate.latencyUs.toFixed(0)} µs.`;
  }
  const dir = path.join(REPO_ROOT, "tools/project/profiles");
  const profileFiles: string[] = [];
  const write = (name: string, profile: HardwareProfile) => {
    const file = path.join(dir, name);
    fs.writeFileSync(file, `${JSON.stringify(profile, null, 2)}\n`);
    profileFiles.push(path.relative(REPO_ROOT, file));
  };
  // this-machine.json: the one-core device with the link measured between `cores` ranks (the machine as a node of one-core devices).
  const nodeLink = allToAll.find((r) => r.ranks === info.cores) ?? allToAll[0];
  write("this-machine.json", nodeLink === undefined ? machine : { ...machine, intraNode: { bandwidthGBs: nodeLink.bandwidthGBs, latencyUs: nodeLink.latencyUs }, interNode: { bandwidthGBs: nodeLink.bandwidthGBs, latencyUs: nodeLink.latencyUs } });
  for (const [p, profile] of Object.entries(profiles)) write(`this-machine-p${p}.json`, profile);
  const measured = rows
    .filter((r) => r.kind === "ulysses" && r.ranks > 1 && f.ranks.includes(r.ranks) && f.seqs.includes(r.seq) && profiles[r.ranks] !== undefined)
    .map((r) => ({ scheme: "ulysses" as const, degree: r.ranks, seqLen: r.seq, seconds: r.stepMs / 1000 }));
  const checked = checkProjection(model, measured, (p) => profiles[p]!);
  return { model, shared, machine, calibration, calibrationPoints: points, profiles, profileFiles, rows: checked };
}
