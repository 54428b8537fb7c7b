/**
 * The projection check: builds hardware profiles for a machine from numbers
 * measured on it, calibrates the two fixed-cost keys on one configuration,
 * predicts other configurations with `project` and compares them with their
 * measured step times. The measuring is the caller's (tools/bench `bench:paper`);
 * this module is arithmetic only.
 *
 * How one shared-memory machine maps onto the cost model's devices: a rank
 * (one ONNX Runtime thread and its JavaScript thread) is a device. Its
 * profile keeps the peak of one core (the MatMul rate of one ONNX Runtime
 * thread running alone) and takes its efficiencies from kernel rates measured
 * on the P ranks themselves, every rank running the kernel at once at the
 * shape it has in the model (the model's GEMMs; attention on the heads one
 * rank holds): the cores' sharing (caches, memory bandwidth, SMT siblings,
 * time-sharing when P exceeds the cores) is in those measured rates, not in a
 * formula. The fixed costs (elementwise ns by tokens per rank) are
 * calibrated on P = 1 (one rank alone, `calibrateFixedCosts`) and divided by
 * the rank's speed s(P) = (its GEMM rate with P ranks at once) / (the GEMM
 * rate of one rank alone), capped at 1. Links: all ranks on one node, at the
 * all-to-all bandwidth and latency measured between P ranks.
 */
import { gptForwardFlops, TRAINING_PASSES } from "@ulysses/measure";
import { gptDimensionsOf, project, type GptShape, type RunShape } from "./cost-model.js";
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
  /** Attention forward+backward on one thread, useful GFLOP/s under the cost model's convention (@ulysses/measure's attentionFlops: causal over N(N+1)/2 pairs). */
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
      ...(m.attentionGflopsBySeq === undefined
        ? {}
        : {
            attentionEfficiencyBySeq: m.attentionGflopsBySeq.map((r) => ({
              seqLen: r.seqLen,
              efficiency: Math.min(1, positive("attentionGflopsBySeq", r.gflops) / peak),
            })),
          }),
    },
    `machineProfile(${m.name})`,
  );
}

/** One training step of `model` on P ranks of one machine (micro-batch 1, no ZeRO, no checkpointing; q, k, v in one all-to-all as @ulysses/block sends them). */
export function machineRun(scheme: RunShape["scheme"], degree: number, seqLen: number, causal = true): RunShape {
  return {
    scheme,
    devices: degree,
    degree,
    seqLen,
    microBatch: 1,
    globalBatchTokens: seqLen,
    zeroStage: 0,
    activationCheckpointing: false,
    causal,
    fusedQkv: true,
  };
}

export interface CalibrationPoint {
  seqLen: number;
  /** Measured step time at P = 1, seconds. */
  seconds: number;
  /** Optional: the time the step spent in its attention kernel, measured in the same step, seconds; replaces the profile's attention term. */
  attentionSeconds?: number;
}

export interface Calibration {
  /** The memory-bound ops' cost at each point's token count (the profile's `elementwiseNsByTokens`). */
  elementwiseNsByTokens: { tokens: number; nsPerTokenHidden: number }[];
  /** Step time minus the matmul and attention terms at each point, seconds. */
  residuals: number[];
}

/**
 * The fixed costs from P = 1 measurements at several sequence lengths: at
 * each point the residual (step time minus the matmul term, minus the
 * attention kernel's measured time or else the attention term) is spread
 * over passes·L·N·h token-hidden units: `elementwiseNsByTokens` at N tokens
 * (negative residuals, the rate terms already explaining the step, count as
 * 0). `perLayerOverheadUs` stays 0: the table's short end holds the per-call
 * overheads.
 */
export function calibrateFixedCosts(model: GptShape, machine: HardwareProfile, points: readonly CalibrationPoint[], causal = true): Calibration {
  if (points.length === 0) throw new ProjectionError("calibrateFixedCosts: needs at least one P = 1 point");
  const seen = new Set<number>();
  for (const p of points) {
    if (seen.has(p.seqLen)) throw new ProjectionError(`calibrateFixedCosts: each point needs its own sequence length, got ${p.seqLen} twice`);
    seen.add(p.seqLen);
  }
  const { elementwiseNsByTokens: _table, ...rest } = machine;
  const bare: HardwareProfile = { ...rest, elementwiseNsPerTokenHidden: 0, perLayerOverheadUs: 0 };
  const passes = TRAINING_PASSES;
  const residuals = points.map((p) => {
    const terms = checkProjection(model, [{ scheme: "ulysses", degree: 1, seqLen: p.seqLen, seconds: p.seconds }], () => bare, causal)[0]!.terms;
    return p.seconds - terms.matmul - (p.attentionSeconds ?? terms.attention);
  });
  const elementwiseNsByTokens = points
    .map((p, i) => ({ tokens: p.seqLen, nsPerTokenHidden: (Math.max(0, residuals[i]!) / (passes * model.layers * p.seqLen * model.hidden)) * 1e9 }))
    .sort((a, b) => a.tokens - b.tokens);
  return { elementwiseNsByTokens, residuals };
}

/** Kernel rates one of P ranks gets while all P ranks run them (measured on the ranks, every rank at once). */
export interface RankRates {
  /** The model's GEMMs at its shapes, GFLOP/s per rank. */
  shapedMatmulGflops: number;
  /** Attention forward + backward on the heads one rank holds, useful GFLOP/s per rank (causal over N(N+1)/2 pairs), by sequence length. */
  attentionGflopsBySeq: { seqLen: number; gflops: number }[];
}

/** A rank's speed for the fixed costs: its GEMM rate with P ranks at once over one rank's alone, capped at 1. */
export function rankSpeed(rankShapedMatmulGflops: number, soloShapedMatmulGflops: number): number {
  if (!(rankShapedMatmulGflops > 0) || !(soloShapedMatmulGflops > 0))
    throw new ProjectionError(`rankSpeed: GEMM rates must be positive, got ${rankShapedMatmulGflops} and ${soloShapedMatmulGflops}`);
  return Math.min(1, rankShapedMatmulGflops / soloShapedMatmulGflops);
}

/**
 * The device profile of one of P ranks sharing the machine (see the module
 * comment): the one-core profile `core` (its peak and calibrated fixed costs)
 * with the efficiencies of `rates`, the fixed costs divided by the rank's
 * speed, and `link` as both links. `soloShapedMatmulGflops`: the GEMM rate of
 * one rank alone, measured as `rates.shapedMatmulGflops` is.
 */
export function rankProfile(
  core: HardwareProfile,
  degree: number,
  cores: number,
  link: LinkProfile,
  rates: RankRates,
  soloShapedMatmulGflops: number,
): HardwareProfile {
  if (!Number.isInteger(degree) || degree < 1) throw new ProjectionError(`rankProfile: degree must be a positive integer, got ${degree}`);
  if (!Number.isInteger(cores) || cores < 1) throw new ProjectionError(`rankProfile: cores must be a positive integer, got ${cores}`);
  if (rates.attentionGflopsBySeq.length === 0) throw new ProjectionError(`rankProfile: rates.attentionGflopsBySeq is empty (degree ${degree})`);
  const speed = rankSpeed(rates.shapedMatmulGflops, soloShapedMatmulGflops);
  const peak = core.peakTflops * 1000;
  const efficiency = (name: string, gflops: number) => {
    if (!(gflops > 0) || !Number.isFinite(gflops)) throw new ProjectionError(`rankProfile: ${name} must be a positive measured rate, got ${gflops}`);
    return Math.min(1, gflops / peak);
  };
  const bySeq = rates.attentionGflopsBySeq
    .map((r) => ({ seqLen: r.seqLen, efficiency: efficiency(`attention rate at N = ${r.seqLen}`, r.gflops) }))
    .sort((a, b) => a.seqLen - b.seqLen);
  return parseProfile(
    {
      ...core,
      name: degree <= cores ? `${core.name}, ${degree} ranks on ${cores} cores (one core each)` : `${core.name}, ${degree} ranks time-sharing ${cores} cores`,
      devicesPerNode: Math.max(degree, cores),
      matmulEfficiency: efficiency("shapedMatmulGflops", rates.shapedMatmulGflops),
      attentionEfficiency: bySeq.at(-1)!.efficiency,
      attentionEfficiencyBySeq: bySeq,
      intraNode: { ...link },
      interNode: { ...link },
      elementwiseNsPerTokenHidden: core.elementwiseNsPerTokenHidden / speed,
      perLayerOverheadUs: core.perLayerOverheadUs / speed,
      ...(core.elementwiseNsByTokens === undefined
        ? {}
        : { elementwiseNsByTokens: core.elementwiseNsByTokens.map((r) => ({ tokens: r.tokens, nsPerTokenHidden: r.nsPerTokenHidden / speed })) }),
    },
    `rankProfile(${degree})`,
  );
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
export function checkProjection(
  model: GptShape,
  measured: readonly MeasuredStep[],
  profileFor: (degree: number) => HardwareProfile,
  causal = true,
): CheckRow[] {
  return measured.map((m) => {
    const hw = profileFor(m.degree);
    const p = project(model, machineRun(m.scheme, m.degree, m.seqLen, causal), hw);
    const fwd = gptForwardFlops(gptDimensionsOf(model), m.seqLen, causal);
    const peak = hw.peakTflops * 1e12;
    const matmul = (TRAINING_PASSES * fwd.matmul) / m.degree / (peak * hw.matmulEfficiency);
    const headShare = Math.ceil(model.heads / m.degree) / model.heads;
    const attention = (TRAINING_PASSES * fwd.attention * headShare) / (peak * attentionEfficiencyAt(hw, m.seqLen));
    return {
      ...m,
      predictedSeconds: p.stepSeconds,
      errorPercent: (100 * (p.stepSeconds - m.seconds)) / m.seconds,
      terms: { matmul, attention, fixed: p.computeSeconds - matmul - attention, communication: p.parallelCommSeconds },
    };
  });
}
