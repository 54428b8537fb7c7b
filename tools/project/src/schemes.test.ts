import { describe, expect, it } from "vitest";
import { collectiveCost } from "./collective-cost.js";
import { megatronDeepSpeedFlops, project, type GptShape, type RunShape } from "./cost-model.js";
import { bestFactorization, factorizations } from "./factorization.js";
import { parseProfile, type HardwareProfile } from "./profile.js";

// 1 TFLOP/s peak, matmul at 50%, attention at 25%, 1 GB/s links without latency, 4 devices a node.
const hw: HardwareProfile = parseProfile({
  name: "unit",
  devicesPerNode: 4,
  peakTflops: 1,
  matmulEfficiency: 0.5,
  attentionEfficiency: 0.25,
  memoryGiB: 1000,
  bytesPerElement: 2,
  intraNode: { bandwidthGBs: 1, latencyUs: 0 },
  interNode: { bandwidthGBs: 0.25, latencyUs: 0 },
});

const gpt: GptShape = { name: "t", layers: 2, hidden: 1024, heads: 16, vocab: 1000, ffnMultiplier: 4 };
const gqa: GptShape = { ...gpt, name: "gqa", kvHeads: 2 };

const run = (over: Partial<RunShape>): RunShape => ({
  scheme: "ring",
  devices: 4,
  degree: 4,
  seqLen: 4096,
  microBatch: 1,
  globalBatchTokens: 1,
  zeroStage: 0,
  activationCheckpointing: false,
  causal: true,
  ...over,
});

describe("ring and hybrid schemes", () => {
  it("ring bytes: (P−1) K,V blocks forward, 2(P−1) backward (K,V and dK,dV), +(P−1) for the recompute", () => {
    // Block: 2 (k, v) · 1 · N/P = 1024 tokens · 16 kv heads · 64 · 2 bytes = 4 MiB.
    const block = 2 * 1024 * 16 * 64 * 2;
    expect(project(gpt, run({}), hw).parallelBytesPerDevice).toBe(2 * 3 * 3 * block);
    expect(project(gpt, run({ activationCheckpointing: true }), hw).parallelBytesPerDevice).toBe(2 * 3 * 4 * block);
    // GQA: the block carries the 2 kv heads only.
    expect(project(gqa, run({}), hw).parallelBytesPerDevice).toBe(2 * 3 * 3 * (block / 8));
  });

  it("Ulysses with P > kv heads replicates them: one kv head per rank, kv bytes grow by P/Hkv", () => {
    const u = project(gqa, run({ scheme: "ulysses" }), hw);
    const tokens = 4096 / 4;
    const q = (3 / 4) * tokens * 1024 * 2; // q (and out): (P−1)/P of the b·N/P·h shard
    const kv = 3 * tokens * 1 * 64 * 2; // k (and v): one 64-wide head to each of the 3 peers
    // Two layers, forward + backward, q, k, v, out.
    expect(u.parallelBytesPerDevice).toBeCloseTo(2 * 2 * (2 * q + 2 * kv), 6);
    // Without replication each peer would get Hkv/P = 1/2 head: P/Hkv = 2x fewer kv bytes.
    const unreplicated = (3 / 4) * tokens * 2 * 64 * 2;
    expect(kv / unreplicated).toBe(2);
    // With P = Hkv = 2 there is nothing to replicate.
    const two = project(gqa, run({ scheme: "ulysses", devices: 2, degree: 2 }), hw);
    const tokens2 = 4096 / 2;
    expect(two.parallelBytesPerDevice).toBeCloseTo(2 * 2 * 2 * ((1 / 2) * tokens2 * 1024 * 2 + (1 / 2) * tokens2 * 2 * 64 * 2), 6);
  });

  it("zigzag balances the causal work: ring attention time = Ulysses attention time; contiguous pays ((2P−1)B+1)/(PB+1)", () => {
    const slow = { ...hw, intraNode: { bandwidthGBs: 1e6, latencyUs: 0 }, interNode: { bandwidthGBs: 1e6, latencyUs: 0 } };
    const ring = project(gpt, run({}), slow).sequenceParallel!;
    const ulysses = project(gpt, run({ scheme: "ulysses" }), slow).sequenceParallel!;
    // Ulysses: N(N+1)/2 pairs, 4 of 16 heads, 64 wide, 4·64 FLOPs a pair forward, 3 passes, 2 layers, at 0.25 TFLOP/s.
    const expected = (2 * 3 * 4 * 64 * 4 * ((4096 * 4097) / 2)) / 0.25e12;
    expect(ulysses.attentionSeconds).toBeCloseTo(expected, 12);
    expect(ring.attentionSeconds).toBeCloseTo(expected, 12);
    const contiguous = project(gpt, run({ layout: "contiguous" }), slow).sequenceParallel!;
    const block = 1024;
    expect(contiguous.attentionSeconds / ring.attentionSeconds).toBeCloseTo((7 * block + 1) / (4 * block + 1), 12);
  });

  it("the next block's transfer hides behind block compute: exposed = Σ max(0, T − C) over all but the last step", () => {
    const ring = project(gpt, run({}), hw).sequenceParallel!;
    const c = 4096 / 8; // zigzag chunk
    const heads = 16;
    const forward = (pairs: number) => (4 * 64 * heads * pairs) / 0.25e12;
    const cs = [forward(2 * c * c + c), forward(2 * c * c), forward(2 * c * c)]; // steps 0..2 carry a transfer
    const block = 2 * 1024 * 16 * 64 * 2;
    const tf = block / 1e9;
    const tb = (2 * block) / 1e9;
    const exposed = cs.reduce((a, x) => a + Math.max(0, tf - x), 0) + cs.reduce((a, x) => a + Math.max(0, tb - 2 * x), 0);
    expect(ring.ringExposedSeconds).toBeCloseTo(2 * exposed, 12);
    expect(project(gpt, run({}), hw).parallelCommSeconds).toBeCloseTo(2 * exposed, 12);
    // Without overlap every transferring step adds the whole transfer.
    const serial = project(gpt, run({ overlapRingTransfer: false }), hw).sequenceParallel!;
    expect(serial.ringExposedSeconds).toBeCloseTo(2 * 3 * (tf + tb), 12);
  });

  it("a ring that spans nodes waits for the inter-node link on every step", () => {
    const wide = project(gpt, run({ devices: 8, degree: 8 }), hw).sequenceParallel!;
    expect(wide.ringInterNode).toBe(true);
    const block = 2 * 512 * 16 * 64 * 2;
    const c = 4096 / 16;
    const cs = Array.from({ length: 7 }, (_, s) => (4 * 64 * 16 * (s === 0 ? 2 * c * c + c : 2 * c * c)) / 0.25e12);
    const exposed = cs.reduce((a, x) => a + Math.max(0, block / 0.25e9 - x) + Math.max(0, (2 * block) / 0.25e9 - 2 * x), 0);
    expect(wide.ringExposedSeconds).toBeCloseTo(2 * exposed, 12);
    expect(project(gpt, run({}), hw).sequenceParallel!.ringInterNode).toBe(false);
  });

  it("hybrid: all-to-all inside u consecutive ranks plus the ring across r groups; u = P is Ulysses, u = 1 is ring", () => {
    const h = project(gqa, run({ scheme: "hybrid", devices: 8, degree: 8, ulyssesDegree: 2 }), hw).sequenceParallel!;
    expect([h.ringDegree, h.queryHeadsPerRank, h.kvHeadsPerRank]).toEqual([4, 8, 1]);
    const tokens = 4096 / 8;
    // All-to-all in pairs of ranks: q and out (1/2 of b·N/P·h), k and v (one head to the one peer); forward and backward; 2 layers.
    const a2a = 2 * 2 * (2 * (1 / 2) * tokens * 1024 * 2 + 2 * tokens * 64 * 2);
    expect(h.allToAllBytes).toBeCloseTo(a2a, 6);
    // Ring over 4 groups on N/r = 1024-token blocks of the one kv head a rank holds.
    expect(h.ringBlockBytes).toBe(2 * 1024 * 1 * 64 * 2);
    expect(h.ringBytes).toBe(2 * 3 * 3 * h.ringBlockBytes);
    const asUlysses = project(gpt, run({ scheme: "hybrid", ulyssesDegree: 4 }), hw);
    expect(asUlysses.stepSeconds).toBeCloseTo(project(gpt, run({ scheme: "ulysses" }), hw).stepSeconds, 12);
    const asRing = project(gpt, run({ scheme: "hybrid", ulyssesDegree: 1 }), hw);
    expect(asRing.stepSeconds).toBeCloseTo(project(gpt, run({}), hw).stepSeconds, 12);
  });

  it("validates the degrees, heads and sequence with the offending values", () => {
    expect(() => project(gpt, run({ scheme: "hybrid" }), hw)).toThrow(/hybrid needs ulyssesDegree/);
    expect(() => project(gpt, run({ scheme: "hybrid", ulyssesDegree: 3 }), hw)).toThrow(/ulyssesDegree must be a positive integer dividing degree 4, got 3/);
    expect(() => project(gpt, run({ scheme: "hybrid", ulyssesDegree: 2, ringDegree: 4 }), hw)).toThrow(/ulyssesDegree 2 × ringDegree 4 = 8, not degree 4/);
    expect(() => project(gpt, run({ scheme: "hybrid", devices: 32, degree: 32, ulyssesDegree: 32 }), hw)).toThrow(/ulyssesDegree 32 exceeds the 16 heads/);
    expect(() => project(gpt, run({ seqLen: 4098 }), hw)).toThrow(/sequence 4098 is not divisible by degree 4/);
    expect(() => project(gpt, run({ seqLen: 4 * 1025 }), hw)).toThrow(/zigzag needs the sequence 4100 divisible by 2·degree = 8/);
    expect(project(gpt, run({ seqLen: 4 * 1025, layout: "contiguous" }), hw).stepSeconds).toBeGreaterThan(0);
    expect(() => project({ ...gpt, kvHeads: 3 }, run({}), hw)).toThrow(/kvHeads must be a positive integer dividing heads 16, got 3/);
    expect(() => project(gpt, run({ layout: "spiral" as "zigzag" }), hw)).toThrow(/layout must be zigzag or contiguous, got 'spiral'/);
    // Ring has no head limit: 32 ranks on 16 heads.
    expect(project(gpt, run({ devices: 32, degree: 32 }), hw).sequenceParallel!.queryHeadsPerRank).toBe(16);
  });
});

describe("FLOP counts reported", () => {
  it("hardware FLOPs add the layers' recomputed forward under checkpointing (the LM head is not recomputed)", () => {
    const p = project(gpt, run({ scheme: "ulysses", activationCheckpointing: true, globalBatchTokens: 4096 }), hw);
    const layersForward = 2 * (24 * 4096 * 1024 * 1024 + 4 * 1024 * ((4096 * 4097) / 2));
    const head = 2 * 4096 * 1024 * 1000;
    expect(p.modelFlops).toBe(3 * (layersForward + head));
    expect(p.hardwareFlops).toBe(4 * layersForward + 3 * head);
    expect(p.hardwareTflopsPerDevice / p.tflopsPerDevice).toBeCloseTo((4 * layersForward + 3 * head) / (3 * (layersForward + head)), 12);
    const plain = project(gpt, run({ scheme: "ulysses", globalBatchTokens: 4096 }), hw);
    expect(plain.hardwareFlops).toBe(plain.modelFlops);
  });

  it("Megatron-DeepSpeed's 2023 count: 24·f·B·s·L·h²·(1 + s/6h + V/16Lh), f = 4 with checkpointing", () => {
    const expected = 24 * 4 * 3 * 2048 * 2 * 1024 * 1024 * (1 + 2048 / 6144 + 1000 / (16 * 2 * 1024));
    expect(megatronDeepSpeedFlops(gpt, 2048, 3, true) / expected).toBeCloseTo(1, 12);
    expect(megatronDeepSpeedFlops(gpt, 2048, 1, false) / megatronDeepSpeedFlops(gpt, 2048, 1, true)).toBeCloseTo(3 / 4, 12);
  });
});

describe("ring collectives across nodes", () => {
  it("share the node's NICs: min(B_intra, g·B_inter); all-to-all stays on one NIC per device", () => {
    // 8 devices on 2 nodes of 4: ring all-gather at min(1, 4·0.25) = 1 GB/s.
    expect(collectiveCost("allGather", 8, 1e9, hw).seconds).toBeCloseTo(7, 12);
    const narrow = { ...hw, interNode: { bandwidthGBs: 0.1, latencyUs: 0 } };
    expect(collectiveCost("allGather", 8, 1e9, narrow).seconds).toBeCloseTo(7 / 0.4, 12);
    expect(collectiveCost("allReduce", 8, 1e9, narrow).seconds).toBeCloseTo((2 * 7) / 8 / 0.4, 12);
    // All-to-all: 4 off-node chunks of 1/8 GB at 0.1 GB/s.
    expect(collectiveCost("allToAll", 8, 1e9, narrow).seconds).toBeCloseTo((4 * 0.125) / 0.1, 12);
  });
});

describe("the (u, r) search", () => {
  it("lists every u dividing P up to the heads, and picks the fastest that fits", () => {
    const four: GptShape = { ...gpt, heads: 4 };
    const base = {
      devices: 8,
      degree: 8,
      seqLen: 4096,
      microBatch: 1,
      globalBatchTokens: 1,
      zeroStage: 0 as const,
      activationCheckpointing: false,
      causal: true,
    };
    const all = factorizations(four, base, hw);
    expect(all.map((f) => [f.ulyssesDegree, f.ringDegree])).toEqual([
      [1, 8],
      [2, 4],
      [4, 2],
    ]);
    expect(all.map((f) => f.projection.run.scheme)).toEqual(["ring", "hybrid", "hybrid"]);
    const { best } = bestFactorization(four, base, hw);
    expect(best.projection.stepSeconds).toBe(Math.min(...all.map((f) => f.projection.stepSeconds)));
    // Out of memory everywhere: the least-bad (fastest) split is still returned, flagged.
    const tight = { ...hw, memoryGiB: 1e-9 };
    expect(bestFactorization(four, base, tight).best.projection.outOfMemory).toBe(true);
    expect(() => factorizations(four, { ...base, seqLen: 4100 }, hw)).toThrow(/no \(u, r\) with u·r = 8 fits t \(4 heads\) at sequence 4100/);
  });
});
