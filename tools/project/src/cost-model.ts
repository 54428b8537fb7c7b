/**
 * Step time, throughput and memory of one training step of a GPT under
 * Ulysses sequence parallelism or Megatron-style tensor + sequence
 * parallelism, from a hardware profile. Every formula is written out in this
 * package's README with its source; the code follows it term by term. The
 * FLOP counts are @ulysses/measure's (the trainer's MFU and the benchmarks
 * count the same way).
 */
import { gptForwardFlops, gptMatrixWeights, gptTrainingFlops, TRAINING_PASSES, type GptDimensions } from "@ulysses/measure";
import { collectiveCost, type CollectiveKind } from "./collective-cost.js";
import { attentionEfficiencyAt, elementwiseNsAt, ProjectionError, type HardwareProfile } from "./profile.js";

export interface GptShape {
  name: string;
  layers: number;
  hidden: number;
  heads: number;
  vocab: number;
  /** MLP hidden size over model hidden size (4 for GPT). */
  ffnMultiplier: number;
}

export type Scheme = "ulysses" | "megatron";

export interface RunShape {
  scheme: Scheme;
  /** Devices in the job. */
  devices: number;
  /** SP degree (ulysses) or TP=SP degree (megatron); devices / degree is the data-parallel degree. */
  degree: number;
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
   * Ulysses only: q, k and v cross in one all-to-all of 3x the bytes (as
   * @ulysses/block does) instead of three (as DeepSpeed does). The same bytes,
   * fewer latencies. Default false.
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
  /** Sequence/tensor-parallel communication per micro-step. */
  parallelCommSeconds: number;
  /** Gradient / ZeRO communication per step. */
  dataParallelCommSeconds: number;
  /** Bytes each device sends per micro-step in the SP/TP collectives. */
  parallelBytesPerDevice: number;
  memoryBytes: { weightsGradsOptimizer: number; activations: number; total: number };
  outOfMemory: boolean;
  /** Model FLOPs per step (all devices), causal attention over its N(N+1)/2 pairs. */
  modelFlops: number;
  tflopsPerDevice: number;
  tokensPerSecond: number;
}

/** The sizes @ulysses/measure's FLOP counts read: multi-head attention, an MLP of ffnMultiplier·h, the tied head. */
export function gptDimensionsOf(m: GptShape): GptDimensions {
  return { layers: m.layers, hidden: m.hidden, vocab: m.vocab, mlpHidden: m.ffnMultiplier * m.hidden };
}

/** Parameters: the matrices, 12·L·h² for the blocks (with ffnMultiplier 4) plus V·h for the tied embedding (norms and biases left out). */
export function parameterCount(m: GptShape): number {
  return gptMatrixWeights(gptDimensionsOf(m));
}

export function validateRun(m: GptShape, r: RunShape): void {
  const where = `${r.scheme} on ${r.devices} devices, degree ${r.degree}`;
  if (!Number.isInteger(r.devices) || r.devices < 1) throw new ProjectionError(`${where}: devices must be a positive integer`);
  if (!Number.isInteger(r.degree) || r.degree < 1 || r.devices % r.degree !== 0) {
    throw new ProjectionError(`${where}: degree must divide devices (devices ${r.devices} % degree ${r.degree} = ${r.devices % r.degree})`);
  }
  if (r.degree > m.heads) throw new ProjectionError(`${where}: degree ${r.degree} exceeds the ${m.heads} heads of ${m.name}`);
  if (r.seqLen % r.degree !== 0) throw new ProjectionError(`${where}: sequence ${r.seqLen} is not divisible by degree ${r.degree}`);
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

  // Compute: training = forward + backward (2x forward); checkpointing adds one forward.
  const fwd = gptForwardFlops(gptDimensionsOf(m), n, r.causal);
  const passes = TRAINING_PASSES + (r.activationCheckpointing ? 1 : 0);
  // Heads may not divide evenly: the busiest device has ceil(H/P) heads.
  const headShare = Math.ceil(m.heads / p) / m.heads;
  const matmulPerDevice = (b * passes * fwd.matmul) / p;
  const attentionPerDevice = b * passes * fwd.attention * headShare;
  const peak = hw.peakTflops * 1e12;
  const elementwise = passes * m.layers * b * (n / p) * h * elementwiseNsAt(hw, b * (n / p)) * 1e-9;
  const overhead = m.layers * hw.perLayerOverheadUs * 1e-6 * passes;
  const computeSeconds = matmulPerDevice / (peak * hw.matmulEfficiency) + attentionPerDevice / (peak * attentionEfficiencyAt(hw, n)) + elementwise + overhead;

  // Sequence/tensor-parallel communication per layer.
  const calls: { kind: CollectiveKind; localBytes: number; count: number }[] = [];
  const shardBytes = b * (n / p) * h * e;
  if (r.scheme === "ulysses") {
    // q, k, v and out forward; their gradients backward; the recompute repeats the forward's.
    const passes = r.activationCheckpointing ? 3 : 2;
    if (r.fusedQkv === true) {
      calls.push({ kind: "allToAll", localBytes: 3 * shardBytes, count: passes });
      calls.push({ kind: "allToAll", localBytes: shardBytes, count: passes });
    } else {
      calls.push({ kind: "allToAll", localBytes: shardBytes, count: 4 * passes });
    }
  } else {
    // Megatron SP: all-gather before attention and MLP, reduce-scatter after each; mirrored in backward.
    const extra = r.activationCheckpointing ? 2 : 0;
    calls.push({ kind: "allGather", localBytes: shardBytes, count: 4 + extra });
    calls.push({ kind: "reduceScatter", localBytes: shardBytes, count: 4 + extra });
  }
  let parallelCommSeconds = 0;
  let parallelBytesPerDevice = 0;
  for (const c of calls) {
    const cost = collectiveCost(c.kind, p, c.localBytes, hw);
    parallelCommSeconds += m.layers * c.count * cost.seconds;
    parallelBytesPerDevice += m.layers * c.count * cost.bytesSent;
  }

  // Gradient synchronisation. Ulysses replicas of the weights span all devices
  // (SP x DP); Megatron shards weights over TP and replicates over DP.
  const replicaGroup = r.scheme === "ulysses" ? r.devices : dp;
  const paramsPerDevice = r.scheme === "ulysses" ? psi : psi / p;
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
  const fullSequence = r.scheme === "ulysses" ? 4 * b * n * (h / p) * e : 4 * b * n * h * e;
  const logits = r.scheme === "ulysses" ? 2 * localTokens * m.vocab * 4 : 2 * b * n * (m.vocab / p) * 4;
  const activations = (r.activationCheckpointing ? layerInputs + workingSet : m.layers * workingSet) + fullSequence + logits;
  const total = weightsGradsOptimizer + activations;

  // Gradient reduction and ZeRO-3 gathers overlap with compute (bucketed
  // reduce-scatter during backward, prefetched gathers): only the excess shows.
  // SP/TP collectives sit on the critical path between dependent ops.
  const accumulation = Math.max(1, Math.ceil(r.globalBatchTokens / (dp * b * n)));
  const micro = accumulation * (computeSeconds + parallelCommSeconds);
  const stepSeconds = micro + Math.max(0, dataParallelCommSeconds - accumulation * computeSeconds);
  const modelFlops = gptTrainingFlops(gptDimensionsOf(m), n, r.causal, accumulation * dp * b);
  return {
    run: r,
    accumulation,
    stepSeconds,
    computeSeconds,
    parallelCommSeconds,
    dataParallelCommSeconds,
    parallelBytesPerDevice,
    memoryBytes: { weightsGradsOptimizer, activations, total },
    outOfMemory: total > hw.memoryGiB * 2 ** 30,
    modelFlops,
    tflopsPerDevice: modelFlops / stepSeconds / r.devices / 1e12,
    tokensPerSecond: (accumulation * dp * b * n) / stepSeconds,
  };
}

/** The best feasible degree for a scheme (highest throughput without running out of memory), or the least-bad one. */
export function bestProjection(m: GptShape, base: Omit<RunShape, "degree">, hw: HardwareProfile, maxDegree = Infinity): Projection | undefined {
  const candidates: Projection[] = [];
  for (let d = 1; d <= Math.min(base.devices, m.heads, maxDegree); d *= 2) {
    if (base.devices % d !== 0 || base.seqLen % d !== 0) continue;
    candidates.push(project(m, { ...base, degree: d }, hw));
  }
  const fits = candidates.filter((c) => !c.outOfMemory);
  const pool = fits.length > 0 ? fits : candidates;
  return pool.sort((a, c) => c.tflopsPerDevice - a.tflopsPerDevice)[0];
}
