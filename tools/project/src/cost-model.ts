/**
 * Step time, throughput and memory of one training step of a GPT under
 * sequence parallelism (Ulysses, ring attention, or both: see sp-cost.ts) or
 * Megatron-style tensor + sequence parallelism, from a hardware profile.
 * Every formula is written out in this package's README with its source; the
 * code follows it term by term. The FLOP counts are @ulysses/measure's (the
 * trainer's MFU and the benchmarks count the same way).
 */
import { gptForwardFlops, gptMatrixWeights, gptTrainingFlops, TRAINING_PASSES, type GptDimensions } from "@ulysses/measure";
import { collectiveCost, type CollectiveKind } from "./collective-cost.js";
import { attentionEfficiencyAt, elementwiseNsAt, ProjectionError, type HardwareProfile } from "./profile.js";
import { sequenceParallelCost, validateSequenceParallel, type RingLayout, type SequenceParallelCost, type SequenceParallelShape } from "./sp-cost.js";

export interface GptShape {
  name: string;
  layers: number;
  hidden: number;
  heads: number;
  vocab: number;
  /** MLP hidden size over model hidden size (4 for GPT). */
  ffnMultiplier: number;
  /** Key/value heads (grouped-query attention); default `heads`. */
  kvHeads?: number;
}

export type Scheme = "ulysses" | "ring" | "hybrid" | "megatron";

export interface RunShape {
  scheme: Scheme;
  /** Devices in the job. */
  devices: number;
  /** SP degree P (ulysses, ring, hybrid: P = u·r) or TP=SP degree (megatron); devices / degree is the data-parallel degree. */
  degree: number;
  /** Hybrid only: the Ulysses degree u (all-to-all inside u consecutive ranks); required for "hybrid", implied for the others (ulysses: P, ring: 1). */
  ulyssesDegree?: number;
  /** Hybrid only, optional: the ring degree r; when given it must equal degree / ulyssesDegree. */
  ringDegree?: number;
  /** Ring and hybrid, causal: how the sequence is cut over the ring (default "zigzag"). */
  layout?: RingLayout;
  /** Ring and hybrid: the next K,V block's transfer overlaps the current block's compute (default true). */
  overlapRingTransfer?: boolean;
  seqLen: number;
  /** Sequences per data-parallel replica per micro-step. */
  microBatch: number;
  /**
   * Tokens per optimizer step across the job; micro-steps are accumulated
   * until it is reached (at least one), so gradient reduction is paid once per
   * step as in real training.
   */
  globalBatchTokens: number;
  zeroStage: 0 | 1 | 2 | 3;
  activationCheckpointing: boolean;
  /** Causal attention whose kernel skips masked blocks (N(N+1)/2 of the N² (query, key) pairs). */
  causal: boolean;
  /**
   * Ulysses and hybrid: q, k and v cross in one all-to-all of their summed
   * bytes (as @ulysses/block does) instead of three (as DeepSpeed does). The
   * same bytes, fewer latencies. Default false.
   */
  fusedQkv?: boolean;
}

export interface Projection {
  run: RunShape;
  /** Micro-steps accumulated per optimizer step. */
  accumulation: number;
  stepSeconds: number;
  /** Per micro-step. */
  computeSeconds: number;
  /** Sequence/tensor-parallel communication per micro-step (the ring's: only the part its block compute does not hide). */
  parallelCommSeconds: number;
  /** Gradient / ZeRO communication per step. */
  dataParallelCommSeconds: number;
  /** Bytes each device sends per micro-step in the SP/TP collectives (the busiest device: all-to-all plus ring). */
  parallelBytesPerDevice: number;
  /** Ulysses, ring and hybrid: the scheme's terms (attention time, all-to-all, exposed ring, bytes); absent for megatron. */
  sequenceParallel?: SequenceParallelCost;
  memoryBytes: { weightsGradsOptimizer: number; activations: number; total: number };
  outOfMemory: boolean;
  /** Model FLOPs per step (all devices): 3 forwards, causal attention over its N(N+1)/2 pairs, no recomputation. */
  modelFlops: number;
  /** Hardware FLOPs per step: the model FLOPs plus the layers' recomputed forward under activation checkpointing (4 passes instead of 3; the LM head is not recomputed). */
  hardwareFlops: number;
  /** Model TFLOP/s per device. */
  tflopsPerDevice: number;
  /** Hardware TFLOP/s per device (recomputation counted). */
  hardwareTflopsPerDevice: number;
  /** TFLOP/s per device as Megatron-DeepSpeed printed it in 2023 (the DeepSpeed-Ulysses blog's charts): see `megatronDeepSpeedFlops`. */
  reportedTflopsPerDevice: number;
  tokensPerSecond: number;
}

/** The sizes @ulysses/measure's FLOP counts read: an MLP of ffnMultiplier·h, the tied head, K/V width kvHeads·h/heads. */
export function gptDimensionsOf(m: GptShape): GptDimensions {
  const dimensions: GptDimensions = { layers: m.layers, hidden: m.hidden, vocab: m.vocab, mlpHidden: m.ffnMultiplier * m.hidden };
  if (m.kvHeads !== undefined && m.kvHeads !== m.heads) dimensions.kvWidth = (m.kvHeads * m.hidden) / m.heads;
  return dimensions;
}

/** Parameters: the matrices, 12·L·h² for the blocks (with ffnMultiplier 4 and no GQA) plus V·h for the tied embedding (norms and biases left out). */
export function parameterCount(m: GptShape): number {
  return gptMatrixWeights(gptDimensionsOf(m));
}

/**
 * FLOPs per step as Megatron-DeepSpeed's `throughput_calculator` counted them
 * when DeepSpeed-Ulysses was released (megatron/utils.py at commit a2a476e1,
 * 2023-08-23; Narayanan et al. 2021 eq. 3): 24·f·B·s·L·h²·(1 + s/(6h) +
 * V/(16·L·h)) with f = 4 under activation checkpointing, else 3. It counts
 * full s² attention (no causal halving), 4h MLP and multi-head K/V, and puts
 * the factor f on the LM head as well.
 */
export function megatronDeepSpeedFlops(m: GptShape, seqLen: number, sequences: number, activationCheckpointing: boolean): number {
  const f = activationCheckpointing ? 4 : 3;
  const h = m.hidden;
  return 24 * f * sequences * seqLen * m.layers * h * h * (1 + seqLen / (6 * h) + m.vocab / (16 * m.layers * h));
}

/** The Ulysses degree u and ring degree r a run implies: ulysses (P, 1), ring (1, P), hybrid (ulyssesDegree, P/ulyssesDegree). */
export function schemeDegrees(r: RunShape): { ulyssesDegree: number; ringDegree: number } {
  const where = `${r.scheme} on ${r.devices} devices, degree ${r.degree}`;
  if (r.scheme === "ulysses" || r.scheme === "megatron") return { ulyssesDegree: r.degree, ringDegree: 1 };
  if (r.scheme === "ring") return { ulyssesDegree: 1, ringDegree: r.degree };
  const u = r.ulyssesDegree;
  if (u === undefined) throw new ProjectionError(`${where}: hybrid needs ulyssesDegree (u, with ring degree r = degree / u)`);
  if (!Number.isInteger(u) || u < 1 || r.degree % u !== 0) {
    throw new ProjectionError(`${where}: ulyssesDegree must be a positive integer dividing degree ${r.degree}, got ${u}`);
  }
  if (r.ringDegree !== undefined && r.ringDegree * u !== r.degree) {
    throw new ProjectionError(`${where}: ulyssesDegree ${u} × ringDegree ${r.ringDegree} = ${u * r.ringDegree}, not degree ${r.degree}`);
  }
  return { ulyssesDegree: u, ringDegree: r.degree / u };
}

function sequenceParallelShape(m: GptShape, r: RunShape): SequenceParallelShape {
  return {
    layers: m.layers,
    hidden: m.hidden,
    heads: m.heads,
    kvHeads: m.kvHeads ?? m.heads,
    degree: r.degree,
    ulyssesDegree: schemeDegrees(r).ulyssesDegree,
    seqLen: r.seqLen,
    microBatch: r.microBatch,
    causal: r.causal,
    layout: r.layout ?? "zigzag",
    activationCheckpointing: r.activationCheckpointing,
    fusedQkv: r.fusedQkv === true,
    overlapRingTransfer: r.overlapRingTransfer !== false,
  };
}

export function validateRun(m: GptShape, r: RunShape): void {
  const where = `${r.scheme} on ${r.devices} devices, degree ${r.degree}`;
  if (!["ulysses", "ring", "hybrid", "megatron"].includes(r.scheme)) {
    throw new ProjectionError(`${where}: scheme must be ulysses, ring, hybrid or megatron, got '${r.scheme}'`);
  }
  if (!Number.isInteger(r.devices) || r.devices < 1) throw new ProjectionError(`${where}: devices must be a positive integer`);
  if (!Number.isInteger(r.degree) || r.degree < 1 || r.devices % r.degree !== 0) {
    throw new ProjectionError(`${where}: degree must divide devices (devices ${r.devices} % degree ${r.degree} = ${r.devices % r.degree})`);
  }
  if ((r.scheme === "ulysses" || r.scheme === "megatron") && r.degree > m.heads) {
    throw new ProjectionError(`${where}: degree ${r.degree} exceeds the ${m.heads} heads of ${m.name}`);
  }
  if (r.layout !== undefined && r.layout !== "zigzag" && r.layout !== "contiguous") {
    throw new ProjectionError(`${where}: layout must be zigzag or contiguous, got '${r.layout}'`);
  }
  if (r.scheme === "megatron") {
    if (r.seqLen % r.degree !== 0) throw new ProjectionError(`${where}: sequence ${r.seqLen} is not divisible by degree ${r.degree}`);
    return;
  }
  validateSequenceParallel(sequenceParallelShape(m, r), `${where}${r.scheme === "hybrid" ? `, u ${r.ulyssesDegree}` : ""} (${m.name})`);
}

/** Projects one training step. */
export function project(m: GptShape, r: RunShape, hw: HardwareProfile): Projection {
  validateRun(m, r);
  const p = r.degree;
  const dp = r.devices / p;
  const b = r.microBatch;
  const n = r.seqLen;
  const h = m.hidden;
  const e = hw.bytesPerElement;
  const psi = parameterCount(m);
  const megatron = r.scheme === "megatron";

  // Compute: training = forward + backward (2x forward); checkpointing adds one forward.
  const fwd = gptForwardFlops(gptDimensionsOf(m), n, r.causal);
  const passes = TRAINING_PASSES + (r.activationCheckpointing ? 1 : 0);
  const peak = hw.peakTflops * 1e12;
  const matmulSeconds = (b * passes * fwd.matmul) / p / (peak * hw.matmulEfficiency);
  const elementwise = passes * m.layers * b * (n / p) * h * elementwiseNsAt(hw, b * (n / p)) * 1e-9;
  const overhead = m.layers * hw.perLayerOverheadUs * 1e-6 * passes;

  let attentionSeconds: number;
  let parallelCommSeconds = 0;
  let parallelBytesPerDevice = 0;
  let sequenceParallel: SequenceParallelCost | undefined;
  const shardBytes = b * (n / p) * h * e;
  if (megatron) {
    // Heads may not divide evenly: the busiest device has ceil(H/P) heads.
    const headShare = Math.ceil(m.heads / p) / m.heads;
    attentionSeconds = (b * passes * fwd.attention * headShare) / (peak * attentionEfficiencyAt(hw, n));
    // Megatron SP: all-gather before attention and MLP, reduce-scatter after each; mirrored in backward.
    const extra = r.activationCheckpointing ? 2 : 0;
    const calls: { kind: CollectiveKind; localBytes: number; count: number }[] = [
      { kind: "allGather", localBytes: shardBytes, count: 4 + extra },
      { kind: "reduceScatter", localBytes: shardBytes, count: 4 + extra },
    ];
    for (const c of calls) {
      const cost = collectiveCost(c.kind, p, c.localBytes, hw);
      parallelCommSeconds += m.layers * c.count * cost.seconds;
      parallelBytesPerDevice += m.layers * c.count * cost.bytesSent;
    }
  } else {
    sequenceParallel = sequenceParallelCost(sequenceParallelShape(m, r), hw);
    attentionSeconds = sequenceParallel.attentionSeconds;
    parallelCommSeconds = sequenceParallel.allToAllSeconds + sequenceParallel.ringExposedSeconds;
    parallelBytesPerDevice = sequenceParallel.allToAllBytes + sequenceParallel.ringBytes;
  }
  const computeSeconds = matmulSeconds + attentionSeconds + elementwise + overhead;

  // Gradient synchronisation. SP replicas of the weights span all devices
  // (SP x DP); Megatron shards weights over TP and replicates over DP.
  const replicaGroup = megatron ? dp : r.devices;
  const paramsPerDevice = megatron ? psi / p : psi;
  const gradBytes = paramsPerDevice * e;
  const grads = collectiveCost("allReduce", replicaGroup, gradBytes, hw).seconds;
  const zero3Gathers = r.zeroStage === 3 ? 2 * collectiveCost("allGather", replicaGroup, gradBytes / replicaGroup, hw).seconds : 0;
  const dataParallelCommSeconds = grads + zero3Gathers;

  // Memory per device (mixed-precision Adam: 2 + 2 + 12 bytes per parameter; ZeRO
  // partitions over the replica group).
  const share = (stage: number) => (r.zeroStage >= stage ? 1 / replicaGroup : 1);
  const weightsGradsOptimizer = paramsPerDevice * (2 * share(3) + 2 * share(2) + 12 * share(1));
  const scale = e / 2;
  const localTokens = b * (n / p);
  const layerInputs = m.layers * localTokens * h * e;
  const workingSet = 34 * localTokens * h * scale; // one layer's activations (Korthikanti et al., no score matrix)
  let attentionBuffers: number;
  if (megatron) {
    attentionBuffers = 4 * b * n * h * e;
  } else {
    // q and out for H/u heads and k, v for the kv heads a rank holds, over the
    // u-group's N/r tokens; with a ring, two more K,V blocks in flight.
    const sp = sequenceParallel!;
    const u = schemeDegrees(r).ulyssesDegree;
    const headDim = h / m.heads;
    const kvHeads = Math.max(m.kvHeads ?? m.heads, u) / u;
    const groupTokens = b * (n / sp.ringDegree);
    attentionBuffers = groupTokens * (2 * (h / u) + 2 * kvHeads * headDim) * e + (sp.ringDegree > 1 ? 2 * sp.ringBlockBytes : 0);
  }
  const logits = megatron ? 2 * b * n * (m.vocab / p) * 4 : 2 * localTokens * m.vocab * 4;
  const activations = (r.activationCheckpointing ? layerInputs + workingSet : m.layers * workingSet) + attentionBuffers + logits;
  const total = weightsGradsOptimizer + activations;

  // Gradient reduction and ZeRO-3 gathers overlap with compute (bucketed
  // reduce-scatter during backward, prefetched gathers): only the excess shows.
  // SP/TP collectives sit on the critical path between dependent ops.
  const accumulation = Math.max(1, Math.ceil(r.globalBatchTokens / (dp * b * n)));
  const micro = accumulation * (computeSeconds + parallelCommSeconds);
  const stepSeconds = micro + Math.max(0, dataParallelCommSeconds - accumulation * computeSeconds);
  const sequences = accumulation * dp * b;
  const modelFlops = gptTrainingFlops(gptDimensionsOf(m), n, r.causal, sequences);
  const recomputed = r.activationCheckpointing ? sequences * (fwd.matmul - 2 * n * h * m.vocab + fwd.attention) : 0;
  const hardwareFlops = modelFlops + recomputed;
  const perDevice = (flops: number) => flops / stepSeconds / r.devices / 1e12;
  return {
    run: r,
    accumulation,
    stepSeconds,
    computeSeconds,
    parallelCommSeconds,
    dataParallelCommSeconds,
    parallelBytesPerDevice,
    ...(sequenceParallel === undefined ? {} : { sequenceParallel }),
    memoryBytes: { weightsGradsOptimizer, activations, total },
    outOfMemory: total > hw.memoryGiB * 2 ** 30,
    modelFlops,
    hardwareFlops,
    tflopsPerDevice: perDevice(modelFlops),
    hardwareTflopsPerDevice: perDevice(hardwareFlops),
    reportedTflopsPerDevice: perDevice(megatronDeepSpeedFlops(m, n, sequences, r.activationCheckpointing)),
    tokensPerSecond: (sequences * n) / stepSeconds,
  };
}

/** The best feasible degree for a scheme (highest throughput without running out of memory), or the least-bad one. */
export function bestProjection(m: GptShape, base: Omit<RunShape, "degree">, hw: HardwareProfile, maxDegree = Infinity): Projection | undefined {
  const candidates: Projection[] = [];
  const headLimit = base.scheme === "ulysses" || base.scheme === "megatron" ? m.heads : Infinity;
  for (let d = 1; d <= Math.min(base.devices, headLimit, maxDegree); d *= 2) {
    if (base.devices % d !== 0 || base.seqLen % d !== 0) continue;
    if (base.scheme === "hybrid" && (base.ulyssesDegree === undefined || d % base.ulyssesDegree !== 0)) continue;
    if ((base.scheme === "ring" || base.scheme === "hybrid") && base.causal && (base.layout ?? "zigzag") === "zigzag" && base.seqLen % (2 * d) !== 0) continue;
    candidates.push(project(m, { ...base, degree: d }, hw));
  }
  const fits = candidates.filter((c) => !c.outOfMemory);
  const pool = fits.length > 0 ? fits : candidates;
  return pool.sort((a, c) => c.tflopsPerDevice - a.tflopsPerDevice)[0];
}
