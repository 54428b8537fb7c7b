/**
 * The projection check: builds hardware profiles for a machine from numbers
 * measured on it, calibrates the two fixed-cost keys on one configuration,
 * predicts other configurations with `project` and compares them with their
 * measured step times. The measuring is the caller's (tools/bench `bench:paper`);
 * this module is arithmetic only.
 *
 * How one shared-memory machine maps onto the cost model's devices: the
 * machine is one node of C devices, each device one core; its profile (peak =
 * the MatMul rate of one ONNX Runtime thread, fixed costs calibrated on one
 * rank on one core, P = 1) describes a core running alone. A rank runs one
 * ONNX Runtime thread and its JavaScript on one thread. When all C cores are
 * busy a thread keeps only `shared` = (MatMul rate with C threads) / (C x the
 * one-thread rate) of its solo speed (shared caches, memory bandwidth, SMT
 * siblings on VMs); between 1 and C busy threads the factor is interpolated
 * linearly. P > C ranks time-share the cores, each getting C/P of one. So a
 * rank's device runs at speed s(P) = shared(min(P, C)) x min(1, C/P): peak x
 * s(P) (= machine rate / P when P >= C) and fixed costs / s(P). Efficiencies
 * are unchanged. Links: all ranks on one node, at the all-to-all bandwidth
 * and latency measured between P ranks.
 */
import { forwardFlops, project, type GptShape, type RunShape } from "./cost-model.js";
import { attentionEfficiencyAt, parseProfile, ProjectionError, type HardwareProfile, type LinkProfile } from "./profile.js";

export interface MachineMeasurements {
  /** Describes the machine (CPU model, cores). */
  name: string;
  /** Cores the ranks share. */
  cores: number;
  /** ONNX Runtime MatMul rate of one thread (one core) on a large square product, GFLOP/s: a device's peak. */
  matmulGflops: number;
  /** The same (one thread) at the model's GEMM shapes, GFLOP/s (matmulEfficiency = this / matmulGflops). */
  shapedMatmulGflops: number;
  /** Attention forward+backward on one thread, useful GFLOP/s under the cost model's convention (causal at half). */
  attentionGflops: number;
  /** Optional: the same at several sequence lengths (becomes the profile's attentionEfficiencyBySeq). */
  attentionGflopsBySeq?: { seqLen: number; gflops: number }[];
  /** Memory the machine has, GiB. */
  memoryGiB: number;
}

/** The machine as a node of `cores` devices of one core each (see the module comment); fixed costs still zero, links unmeasured (set by the caller). */
export function machineProfile(m: MachineMeasurements, source: string): HardwareProfile {
  const positive = (name: string, v: number) => {
    if (!(v > 0) || !Number.isFinite(v)) throw new ProjectionError(`machineProfile: '${name}' must be a positive measured number, got ${v}`);
    return v;
  };
  const peak = positive("matmulGflops", m.matmulGflops);
  return parseProfile(
    {
      name: m.name,
      source,
      devicesPerNode: m.cores,
      peakTflops: peak / 1000,
      matmulEfficiency: Math.min(1, positive("shapedMatmulGflops", m.shapedMatmulGflops) / peak),
      attentionEfficiency: Math.min(1, positive("attentionGflops", m.attentionGflops) / peak),
      memoryGiB: positive("memoryGiB", m.memoryGiB),
      bytesPerElement: 4,
      intraNode: { bandwidthGBs: 1e6, latencyUs: 0 },
      interNode: { bandwidthGBs: 1e6, latencyUs: 0 },
      elementwiseNsPerTokenHidden: 0,
      perLayerOverheadUs: 0,
      ...(m.attentionGflopsBySeq === undefined ? {} : { attentionEfficiencyBySeq: m.attentionGflopsBySeq.map((r) => ({ seqLen: r.seqLen, efficiency: Math.min(1, positive("attentionGflopsBySeq", r.gflops) / peak) })) }),
    },
    `machineProfile(${m.name})`,
  );
}

/** One training step of `model` on P ranks of one machine (micro-batch 1, no ZeRO, no checkpointing). */
export function machineRun(scheme: RunShape["scheme"], degree: number, seqLen: number, causal = true): RunShape {
  return { scheme, devices: degree, degree, seqLen, microBatch: 1, globalBatchTokens: seqLen, zeroStage: 0, activationCheckpointing: false, causal };
}

export interface CalibrationPoint {
  seqLen: number;
  /** Measured step time at P = 1, seconds. */
  seconds: number;
}

export interface Calibration {
  elementwiseNsPerTokenHidden: number;
  perLayerOverheadUs: number;
  /** Step time minus the matmul and attention terms at each point, seconds. */
  residuals: number[];
}

/**
 * Solves the two fixed-cost keys from two P = 1 measurements: the residual
 * (measured minus matmul and attention terms) is passes·L·N·h·ns + passes·L·overhead,
 * linear in N. Negative solutions (the two rate terms already explain the
 * time) are clamped to 0.
 */
export function calibrateFixedCosts(model: GptShape, machine: HardwareProfile, points: readonly [CalibrationPoint, CalibrationPoint], causal = true): Calibration {
  const [a, b] = points;
  if (a.seqLen === b.seqLen) throw new ProjectionError(`calibrateFixedCosts: the two points need different sequence lengths, got ${a.seqLen} twice`);
  const bare = { ...machine, elementwiseNsPerTokenHidden: 0, perLayerOverheadUs: 0 };
  const residuals = points.map((p) => p.seconds - project(model, machineRun("ulysses", 1, p.seqLen, causal), bare).stepSeconds);
  const passes = 3;
  const perToken = passes * model.layers * model.hidden;
  const slope = (residuals[1]! - residuals[0]!) / (b.seqLen - a.seqLen); // seconds per token
  const ns = Math.max(0, slope / perToken) * 1e9;
  const fixed = residuals[0]! - perToken * a.seqLen * ns * 1e-9;
  const overheadUs = Math.max(0, fixed / (passes * model.layers)) * 1e6;
  return { elementwiseNsPerTokenHidden: ns, perLayerOverheadUs: overheadUs, residuals };
}

/** The speed of one of P ranks relative to one thread running alone (see the module comment). */
export function rankSpeed(degree: number, cores: number, shared: number): number {
  if (!(shared > 0 && shared <= 1)) throw new ProjectionError(`rankSpeed: shared must be in (0, 1], got ${shared}`);
  const busy = Math.min(degree, cores);
  const contention = cores === 1 ? 1 : 1 + ((shared - 1) * (busy - 1)) / (cores - 1);
  return contention * Math.min(1, cores / degree);
}

/**
 * The device profile of one of P ranks sharing the machine, from the one-core
 * device profile; `shared` as in the module comment (1: threads do not slow
 * each other).
 */
export function rankProfile(core: HardwareProfile, degree: number, cores: number, link: LinkProfile, shared = 1): HardwareProfile {
  if (!Number.isInteger(degree) || degree < 1) throw new ProjectionError(`rankProfile: degree must be a positive integer, got ${degree}`);
  if (!Number.isInteger(cores) || cores < 1) throw new ProjectionError(`rankProfile: cores must be a positive integer, got ${cores}`);
  const speed = rankSpeed(degree, cores, shared);
  return {
    ...core,
    name: degree <= cores ? `${core.name}, ${degree} ranks on ${cores} cores (one core each)` : `${core.name}, ${degree} ranks time-sharing ${cores} cores`,
    devicesPerNode: Math.max(degree, cores),
    peakTflops: core.peakTflops * speed,
    intraNode: { ...link },
    interNode: { ...link },
    elementwiseNsPerTokenHidden: core.elementwiseNsPerTokenHidden / speed,
    perLayerOverheadUs: core.perLayerOverheadUs / speed,
  };
}

export interface MeasuredStep {
  scheme: RunShape["scheme"];
  degree: number;
  seqLen: number;
  seconds: number;
}

export interface CheckRow extends MeasuredStep {
  predictedSeconds: number;
  /** (predicted - measured) / measured, percent. */
  errorPercent: number;
  /** The prediction's terms, seconds: matmul, attention, fixed costs, SP communication. */
  terms: { matmul: number; attention: number; fixed: number; communication: number };
}

/** Predicts each measured step with the rank profile of its degree and reports the error. */
export function checkProjection(model: GptShape, measured: readonly MeasuredStep[], profileFor: (degree: number) => HardwareProfile, causal = true): CheckRow[] {
  return measured.map((m) => {
    const hw = profileFor(m.degree);
    const p = project(model, machineRun(m.scheme, m.degree, m.seqLen, causal), hw);
    const fwd = forwardFlops(model, m.seqLen);
    const peak = hw.peakTflops * 1e12;
    const matmul = (3 * fwd.matmul) / m.degree / (peak * hw.matmulEfficiency);
    const headShare = Math.ceil(model.heads / m.degree) / model.heads;
    const attention = (3 * fwd.attention * (causal ? 0.5 : 1) * headShare) / (peak * attentionEfficiencyAt(hw, m.seqLen));
    return {
      ...m,
      predictedSeconds: p.stepSeconds,
      errorPercent: (100 * (p.stepSeconds - m.seconds)) / m.seconds,
      terms: { matmul, attention, fixed: p.computeSeconds - matmul - attention, communication: p.parallelCommSeconds },
    };
  });
}
