/**
 * The attention and sequence-parallel communication of one micro-step under
 * the three sequence-parallel schemes, written as one: Ulysses inside groups
 * of u consecutive ranks, ring attention across the r = P/u groups (USP /
 * LoongTrain's 2D attention). "ulysses" is u = P, r = 1; "ring" is u = 1,
 * r = P; "hybrid" is anything between. Formulas and their sources are in this
 * package's README ("Ring and hybrid"); the code follows it term by term.
 * Megatron-SP stays in cost-model.ts (it is tensor parallelism, not this).
 */
import { collectiveCost } from "./collective-cost.js";
import { attentionEfficiencyAt, ProjectionError, type HardwareProfile } from "./profile.js";

/** How a causal sequence is cut over the ring: zigzag (2r chunks, group i holds chunks i and 2r−1−i) or contiguous (group i holds block i). */
export type RingLayout = "zigzag" | "contiguous";

/** What the scheme cost needs about the model and the run (cost-model.ts builds it from GptShape and RunShape). */
export interface SequenceParallelShape {
  layers: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  /** SP degree P = u · r. */
  degree: number;
  /** Ulysses degree u (all-to-all group of u consecutive ranks). */
  ulyssesDegree: number;
  seqLen: number;
  microBatch: number;
  causal: boolean;
  layout: RingLayout;
  activationCheckpointing: boolean;
  /** q, k and v cross in one all-to-all (the same bytes, a third of the latencies). */
  fusedQkv: boolean;
  /** The next K,V block's transfer is posted before the current block computes (default in every ring implementation); false: transfer, then compute. */
  overlapRingTransfer: boolean;
}

export interface SequenceParallelCost {
  /** Ring degree r = P / u. */
  ringDegree: number;
  /** Query heads one rank attends for: ⌈H/u⌉. */
  queryHeadsPerRank: number;
  /** K/V heads one rank holds during attention: max(1, ⌈Hkv/u⌉) (replicated when u > Hkv). */
  kvHeadsPerRank: number;
  /** Attention compute of the busiest rank, all layers and passes, seconds. */
  attentionSeconds: number;
  /** All-to-all time (on the critical path), all layers and passes, seconds. */
  allToAllSeconds: number;
  /** Ring transfer time not hidden behind block compute, all layers and passes, seconds. */
  ringExposedSeconds: number;
  /** Bytes the busiest rank sends in the all-to-alls, all layers and passes. */
  allToAllBytes: number;
  /** Bytes the busiest rank sends around the ring, all layers and passes. */
  ringBytes: number;
  /** One K,V block: 2·b·(N/r)·kvHeadsPerRank·D·e bytes. */
  ringBlockBytes: number;
  /** Whether a ring hop crosses nodes (then every step waits for the inter-node link). */
  ringInterNode: boolean;
  /** Query-key pairs the busiest rank attends per head and layer, per ring step (step 0 = its own block). */
  pairsPerStep: number[];
}

/**
 * Query-key pairs one head attends at each ring step on the busiest rank:
 * blocks of B = N/r keys, r steps. Non-causal: B² every step. Causal zigzag
 * (chunks of c = N/(2r)): 2c² + c on the own block, 2c² on every other (half
 * a block: all queries against the earlier chunk, or the later chunk's
 * queries against all keys), so every rank does N(N+1)/(2r). Causal
 * contiguous: the last group (the slowest) attends B(B+1)/2 on its own block
 * and B² on each of the r−1 earlier blocks; the first group only its own.
 */
export function ringPairsPerStep(seqLen: number, ringDegree: number, causal: boolean, layout: RingLayout): number[] {
  const r = ringDegree;
  const block = seqLen / r;
  if (!causal) return Array.from({ length: r }, () => block * block);
  if (layout === "contiguous") return Array.from({ length: r }, (_, s) => (s === 0 ? (block * (block + 1)) / 2 : block * block));
  const chunk = seqLen / (2 * r);
  return Array.from({ length: r }, (_, s) => (s === 0 ? 2 * chunk * chunk + chunk : 2 * chunk * chunk));
}

/**
 * Query-key pairs each ring rank attends per head and layer over a whole
 * pass (ring group order): contiguous causal rank g attends its own block
 * causally and the g earlier blocks in full, B(B+1)/2 + g·B²; zigzag and
 * non-causal give every rank the same.
 */
export function ringPairsPerRank(seqLen: number, ringDegree: number, causal: boolean, layout: RingLayout): number[] {
  const r = ringDegree;
  const block = seqLen / r;
  if (causal && layout === "contiguous") return Array.from({ length: r }, (_, g) => (block * (block + 1)) / 2 + g * block * block);
  const busiest = ringPairsPerStep(seqLen, r, causal, layout).reduce((a, q) => a + q, 0);
  return Array.from({ length: r }, () => busiest);
}

/**
 * Time of one ring pass of one layer: step s computes block s while the
 * block of step s+1 travels (posted first), so step s takes max(C_s, T) and
 * the last step C_{r−1}; without overlap every step takes C_s + T (the last
 * one C_{r−1}). Returns [total, compute].
 */
export function ringPassSeconds(stepCompute: readonly number[], transferSeconds: number, overlap: boolean): { total: number; compute: number } {
  let total = 0;
  let compute = 0;
  stepCompute.forEach((c, s) => {
    compute += c;
    const last = s === stepCompute.length - 1;
    total += last ? c : overlap ? Math.max(c, transferSeconds) : c + transferSeconds;
  });
  return { total, compute };
}

export function validateSequenceParallel(s: SequenceParallelShape, where: string): void {
  const u = s.ulyssesDegree;
  if (!Number.isInteger(u) || u < 1 || s.degree % u !== 0) {
    throw new ProjectionError(`${where}: ulyssesDegree must be a positive integer dividing degree ${s.degree}, got ${u}`);
  }
  if (u > s.heads) throw new ProjectionError(`${where}: ulyssesDegree ${u} exceeds the ${s.heads} heads`);
  if (!Number.isInteger(s.kvHeads) || s.kvHeads < 1 || s.heads % s.kvHeads !== 0) {
    throw new ProjectionError(`${where}: kvHeads must be a positive integer dividing heads ${s.heads}, got ${s.kvHeads}`);
  }
  const r = s.degree / u;
  if (s.seqLen % s.degree !== 0) throw new ProjectionError(`${where}: sequence ${s.seqLen} is not divisible by degree ${s.degree}`);
  if (r > 1 && s.causal && s.layout === "zigzag" && s.seqLen % (2 * s.degree) !== 0) {
    throw new ProjectionError(
      `${where}: zigzag needs the sequence ${s.seqLen} divisible by 2·degree = ${2 * s.degree} (2r chunks of N/(2r), split over u ranks)`,
    );
  }
}

/** The attention and SP communication of one micro-step (see the module comment and the README). */
export function sequenceParallelCost(s: SequenceParallelShape, hw: HardwareProfile): SequenceParallelCost {
  const u = s.ulyssesDegree;
  const r = s.degree / u;
  const p = s.degree;
  const b = s.microBatch;
  const n = s.seqLen;
  const e = hw.bytesPerElement;
  const headDim = s.hidden / s.heads;
  const queryHeadsPerRank = Math.ceil(s.heads / u);
  const kvHeadsPerRank = Math.max(1, Math.ceil(s.kvHeads / u));
  const peak = hw.peakTflops * 1e12;
  const block = n / r;

  // Attention compute per ring step: 4·D FLOPs per pair and head forward, 8·D backward.
  const pairs = ringPairsPerStep(n, r, s.causal, s.layout);
  const rate = peak * attentionEfficiencyAt(hw, block);
  const forwardStep = pairs.map((q) => (b * 4 * headDim * queryHeadsPerRank * q) / rate);
  const backwardStep = forwardStep.map((t) => 2 * t);

  // Ring: one K,V block per hop forward; K,V and the dK,dV accumulators backward.
  const ringBlockBytes = 2 * b * block * kvHeadsPerRank * headDim * e;
  const ringInterNode = r > 1 && p > hw.devicesPerNode;
  const link = ringInterNode ? hw.interNode : hw.intraNode;
  const alpha = link.latencyUs * 1e-6;
  const bandwidth = link.bandwidthGBs * 1e9;
  const forwardTransfer = r > 1 ? alpha + ringBlockBytes / bandwidth : 0;
  const backwardTransfer = r > 1 ? alpha + (2 * ringBlockBytes) / bandwidth : 0;
  const forwardPass = ringPassSeconds(forwardStep, forwardTransfer, s.overlapRingTransfer);
  const backwardPass = ringPassSeconds(backwardStep, backwardTransfer, s.overlapRingTransfer);
  const forwardPasses = s.activationCheckpointing ? 2 : 1;
  const attentionSeconds = s.layers * (forwardPasses * forwardPass.compute + backwardPass.compute);
  const ringExposedSeconds = s.layers * (forwardPasses * (forwardPass.total - forwardPass.compute) + (backwardPass.total - backwardPass.compute));
  // Busiest rank: every block makes r − 1 hops each pass, and backward's accumulators too; causal contiguous
  // sends no block into a rank's future, so rank r − 2 is the busiest: (passes + 1)(r − 1) + (r − 2) blocks
  // (ring-attention.ts, ringForwardBytes / ringBackwardBytes).
  const contiguousCausal = s.causal && s.layout === "contiguous" && r > 1;
  const ringBlocks = contiguousCausal ? (forwardPasses + 1) * (r - 1) + (r - 2) : (r - 1) * (forwardPasses + 2);
  const ringBytes = s.layers * ringBlockBytes * ringBlocks;

  // Ulysses all-to-alls inside the u-group on the rank's N/P tokens. A tensor
  // of which every rank receives `headsPerRank` heads puts b·(N/P)·headsPerRank·D·e
  // bytes to each peer: local size M = u·that (M = b·(N/P)·h·e for q and out).
  let allToAllSeconds = 0;
  let allToAllBytes = 0;
  if (u > 1) {
    const perPeerHead = b * (n / p) * headDim * e;
    const qBytes = b * (n / p) * s.hidden * e;
    const kvBytes = perPeerHead * Math.max(s.kvHeads, u);
    const calls: { localBytes: number; count: number }[] = [];
    // Forward: q, k, v and out; backward their gradients; the recompute repeats the forward's.
    const passes = s.activationCheckpointing ? 3 : 2;
    if (s.fusedQkv) calls.push({ localBytes: qBytes + 2 * kvBytes, count: passes });
    else calls.push({ localBytes: qBytes, count: passes }, { localBytes: kvBytes, count: 2 * passes });
    calls.push({ localBytes: qBytes, count: passes });
    for (const c of calls) {
      const cost = collectiveCost("allToAll", u, c.localBytes, hw);
      allToAllSeconds += s.layers * c.count * cost.seconds;
      allToAllBytes += s.layers * c.count * cost.bytesSent;
    }
  }
  return {
    ringDegree: r,
    queryHeadsPerRank,
    kvHeadsPerRank,
    attentionSeconds,
    allToAllSeconds,
    ringExposedSeconds,
    allToAllBytes,
    ringBytes,
    ringBlockBytes,
    ringInterNode,
    pairsPerStep: pairs,
  };
}
