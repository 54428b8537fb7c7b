import { describe, expect, it } from "vitest";
import { checkSchemes, parseSchemesFile, profileFromRates, schemesCheckMarkdown, type SchemeRow } from "./check-schemes.js";
import { parseProfile } from "./profile.js";

// 1 TFLOP/s peak, GEMMs at 50%, attention at 25%, fp32, 1 GB/s links with 100 µs latency, 8 ranks a node.
const machine = {
  name: "hand machine",
  devicesPerNode: 8,
  peakTflops: 1,
  matmulEfficiency: 0.5,
  attentionEfficiency: 0.25,
  memoryGiB: 64,
  bytesPerElement: 4,
  intraNode: { bandwidthGBs: 1, latencyUs: 100 },
  interNode: { bandwidthGBs: 1, latencyUs: 100 },
  elementwiseNsPerTokenHidden: 0,
  perLayerOverheadUs: 0,
};
const profile = parseProfile(machine);

// The block: hidden 256, 8 heads of 32, 2 kv heads, N = 1024 on P = 4 ranks, batch 1.
const block = { N: 1024, heads: 8, kvHeads: 2, hidden: 256, headDim: 32, batch: 1, P: 4 };
const row = (over: Partial<SchemeRow>): SchemeRow => ({
  scheme: "ring",
  layout: "zigzag",
  u: 1,
  r: 4,
  stepSeconds: 0.005,
  bytesPerRank: 1_000_000,
  overlap: true,
  ...block,
  ...over,
});

// Hand calculation, term by term (README "Ring and hybrid"), in µs.
const us = 1e-6;
// GEMMs: 256 tokens per rank × 2 FLOPs × (q, o: 2·256² + k, v: 2·256·64 + MLP: 8·256²) × 3 passes at 0.5 TFLOP/s.
const matmul = (256 * 2 * (2 * 256 * 256 + 2 * 256 * 64 + 8 * 256 * 256) * 3) / 0.5e12;
// Attention forward per step: 4 · 32 · heads on the rank · pairs, at 0.25 TFLOP/s; backward twice that.
const attentionStep = (heads: number, pairs: number) => (4 * 32 * heads * pairs) / 0.25e12;

describe("bench:schemes check", () => {
  it("predicts a zigzag ring row: each step max(block compute, block transfer), no transfer after the last", () => {
    const c = 1024 / 8; // 2r chunks of 128
    const own = attentionStep(8, 2 * c * c + c);
    const other = attentionStep(8, 2 * c * c);
    const blockBytes = 2 * 256 * 2 * 32 * 4; // k and v of 256 tokens, 2 kv heads, fp32
    const tf = 100 * us + blockBytes / 1e9;
    const tb = 100 * us + (2 * blockBytes) / 1e9;
    const forward = Math.max(own, tf) + 2 * Math.max(other, tf) + other;
    const backward = Math.max(2 * own, tb) + 2 * Math.max(2 * other, tb) + 2 * other;
    const expected = matmul + forward + backward;
    const [checked] = checkSchemes([row({ stepSeconds: 0.005, bytesPerRank: 1_179_648 })], profile);
    expect(checked!.predictedSeconds).toBeCloseTo(expected, 12);
    expect(expected).toBeCloseTo(4296.2304 * us, 12); // the same sum written out: 2113.929 + 1612.186 + 570.116 µs
    expect(checked!.errorPercent).toBeCloseTo((100 * (expected - 0.005)) / 0.005, 9);
    // Bytes: 3 hops forward, 3 × (K,V + dK,dV) backward.
    expect(checked!.predictedBytes).toBe(3 * blockBytes + 3 * 2 * blockBytes);
    expect(checked!.bytesErrorPercent).toBe(0);
    expect(checked!.terms.matmul).toBeCloseTo(matmul, 15);
    expect(checked!.terms.ringExposed).toBeCloseTo(forward + backward - 3 * (own + 3 * other), 12);
  });

  it("predicts a Ulysses row: q, k, v in one all-to-all, out in another, kv heads replicated (u = 4 > 2 kv heads)", () => {
    const attention = 3 * attentionStep(2, (1024 * 1025) / 2); // 2 of 8 heads, the whole causal sequence, 3 passes
    const q = 256 * 256 * 4; // b·N/P·h·e
    const kv = 256 * 32 * 4 * 4; // one kv head to each of the 4 ranks (3 peers + itself)
    const qkv = 100 * us + (3 / 4) * (q + 2 * kv) * 1e-9;
    const out = 100 * us + (3 / 4) * q * 1e-9;
    const expected = matmul + attention + 2 * (qkv + out);
    const [checked] = checkSchemes([row({ scheme: "ulysses", u: 4, r: 1, stepSeconds: 0.0053 })], profile);
    expect(checked!.predictedSeconds).toBeCloseTo(expected, 12);
    expect(expected).toBeCloseTo(5305.762816 * us, 12);
    expect(checked!.predictedBytes).toBeCloseTo(2 * (3 / 4) * (q + 2 * kv) + 2 * (3 / 4) * q, 6);
    expect(checked!.terms.allToAll).toBeCloseTo(2 * (qkv + out), 12);
  });

  it("predicts a hybrid row: all-to-all in pairs, then a 2-step ring whose transfers hide behind compute", () => {
    const c = 1024 / 4; // 2r = 4 chunks of 256
    const own = attentionStep(4, 2 * c * c + c); // 4 query heads per rank after the pair all-to-all
    const other = attentionStep(4, 2 * c * c);
    const blockBytes = 2 * 512 * 1 * 32 * 4; // N/r = 512 tokens, one kv head per rank
    const tf = 100 * us + blockBytes / 1e9;
    const tb = 100 * us + (2 * blockBytes) / 1e9;
    expect(own).toBeGreaterThan(tf); // compute-bound: nothing exposed
    const ring = Math.max(own, tf) + other + Math.max(2 * own, tb) + 2 * other;
    const q = 256 * 256 * 4;
    const kv = 256 * 32 * 4 * 2; // one head to each of the 2 ranks of the pair
    const a2a = 2 * (100 * us + (1 / 2) * (q + 2 * kv) * 1e-9) + 2 * (100 * us + (1 / 2) * q * 1e-9);
    const expected = matmul + ring + a2a;
    const [checked] = checkSchemes([row({ scheme: "hybrid", u: 2, r: 2 })], profile);
    expect(checked!.predictedSeconds).toBeCloseTo(expected, 12);
    expect(expected).toBeCloseTo(4781.474816 * us, 12);
    expect(checked!.terms.ringExposed).toBe(0);
    expect(checked!.predictedBytes).toBeCloseTo(2 * (1 / 2) * (q + 2 * kv) + 2 * (1 / 2) * q + 3 * blockBytes, 6);
  });

  it("predicts a contiguous ring without overlap: the last rank's P blocks, every transfer in series", () => {
    const b = 256;
    const own = attentionStep(8, (b * (b + 1)) / 2);
    const other = attentionStep(8, b * b);
    const blockBytes = 2 * 256 * 2 * 32 * 4;
    const tf = 100 * us + blockBytes / 1e9;
    const tb = 100 * us + (2 * blockBytes) / 1e9;
    const expected = matmul + (own + 3 * other + 3 * tf) + (2 * own + 6 * other + 3 * tb);
    const [checked] = checkSchemes([row({ layout: "contiguous", overlap: false })], profile);
    expect(checked!.predictedSeconds).toBeCloseTo(expected, 12);
    expect(expected).toBeCloseTo(6713.722368 * us, 12);
  });

  it("contiguous causal bytes: the busiest rank is r − 2, (passes + 1)(r − 1) + (r − 2) blocks = 8 blocks at r = 4 (zigzag: 9)", () => {
    const blockBytes = 2 * 256 * 2 * 32 * 4;
    const [contiguous, zigzag] = checkSchemes([row({ layout: "contiguous" }), row({})], profile);
    expect(contiguous!.predictedBytes).toBe(8 * blockBytes);
    expect(zigzag!.predictedBytes).toBe(9 * blockBytes);
  });

  it("more ranks than cores: an uneven layout's attention takes max(busiest x cores / P, total / P) of the busiest rank's time", () => {
    // contiguous, B = 256: ring rank g attends B(B+1)/2 + g·B² pairs; the busiest (g = 3) 3.5·B² + B/2, the four together 8·B² + 2B
    const b = 256;
    const busiest = (b * (b + 1)) / 2 + 3 * b * b;
    const total = 4 * ((b * (b + 1)) / 2) + 6 * b * b;
    const shared = checkSchemes([row({ layout: "contiguous" })], profile, { cores: 2 })[0]!;
    const alone = checkSchemes([row({ layout: "contiguous" })], profile)[0]!;
    const factor = Math.max(2 / 4, total / (busiest * 4));
    expect(factor).toBeCloseTo(0.5714, 3);
    expect(shared.terms.attention).toBeCloseTo(alone.terms.attention * factor, 12);
    expect(shared.predictedSeconds - alone.predictedSeconds).toBeCloseTo(alone.terms.attention * (factor - 1), 12);
    // zigzag is balanced: unchanged
    const [zigShared, zigAlone] = [checkSchemes([row({})], profile, { cores: 2 })[0]!, checkSchemes([row({})], profile)[0]!];
    expect(zigShared.predictedSeconds).toBeCloseTo(zigAlone.predictedSeconds, 12);
  });

  it("rejects inconsistent rows naming the row and the value", () => {
    expect(() => checkSchemes([row({ u: 2, r: 4 })], profile)).toThrow(/schemes row 0 .*u × r = 8, not P = 4/);
    expect(() => checkSchemes([row({ scheme: "ulysses", u: 2, r: 2 })], profile)).toThrow(/a ulysses row has r = 1, got r = 2/);
    expect(() => checkSchemes([row({}), row({ headDim: 16 })], profile)).toThrow(/schemes row 1 .*headDim 16 × heads 8 = 128, not hidden 256/);
    expect(() => checkSchemes([row({ stepSeconds: 0 })], profile)).toThrow(/'stepSeconds' must be a positive number, got 0/);
    expect(() => checkSchemes([row({ layout: "diagonal" as "zigzag" })], profile)).toThrow(/layout must be zigzag or contiguous, got 'diagonal'/);
    expect(() => checkSchemes([row({ scheme: "megatron" as "ring" })], profile)).toThrow(/scheme must be ulysses, ring or hybrid, got 'megatron'/);
  });

  it("reads the file with its profile nested, beside the rows, or absent", () => {
    const rows = [row({})];
    expect(parseSchemesFile({ rows, profile: machine }).profile?.peakTflops).toBe(1);
    expect(parseSchemesFile({ rows, ...machine }).profile?.intraNode.latencyUs).toBe(100);
    expect(parseSchemesFile(rows).profile).toBeUndefined();
    expect(parseSchemesFile({ rows }).rows).toHaveLength(1);
    expect(() => parseSchemesFile({ rows: 3 }, "s.json")).toThrow(/s.json: 'rows' must be an array/);
    expect(() => parseSchemesFile({ rows, profile: { ...machine, matmulEfficiency: 2 } }, "s.json")).toThrow(/s.json profile: 'matmulEfficiency'/);
    const markdown = schemesCheckMarkdown(checkSchemes(rows, profile), profile);
    expect(markdown).toContain("| ring | zigzag | 4 | 1 | 4 | 1024 |");
  });

  it("bench:schemes' per-rank bytes: the busiest rank is compared", () => {
    const [checked] = checkSchemes([row({ bytesPerRank: [1_179_648, 589_824, 0, 1_000] })], profile);
    expect(checked!.bytesPerRank).toBe(1_179_648);
    expect(checked!.bytesErrorPercent).toBe(0);
    expect(() => checkSchemes([row({ bytesPerRank: [1, -2] })], profile)).toThrow(
      /'bytesPerRank' must be a non-negative number or an array of them, got \[1,-2\]/,
    );
  });

  it("a profile from bench:schemes' measured rates: peak = the highest rate, GEMM median, attention by key length, p2p links", () => {
    const rates = {
      attention: [
        { seqK: 512, gflopsPerRank: 20 },
        { seqK: 256, gflopsPerRank: 10 },
        { seqK: 512, gflopsPerRank: 30 },
      ],
      gemm: [{ gflopsPerRank: 40 }, { gflopsPerRank: 50 }, { gflopsPerRank: 45 }],
      p2pLatencySeconds: 2e-4,
      p2pBandwidthBytesPerSecond: 3e9,
    };
    const hw = profileFromRates(rates, 4);
    expect(hw.peakTflops).toBeCloseTo(0.05, 12);
    expect(hw.matmulEfficiency).toBeCloseTo(45 / 50, 12);
    expect(hw.attentionEfficiencyBySeq).toEqual([
      { seqLen: 256, efficiency: 10 / 50 },
      { seqLen: 512, efficiency: 25 / 50 },
    ]);
    expect(hw.intraNode).toEqual({ bandwidthGBs: 3, latencyUs: 200 });
    expect([hw.devicesPerNode, hw.bytesPerElement, hw.elementwiseNsPerTokenHidden]).toEqual([4, 4, 0]);
    // The machine's --profile supplies what the rates do not measure.
    const over = profileFromRates(rates, 4, parseProfile({ ...machine, elementwiseNsPerTokenHidden: 7, memoryGiB: 12 }));
    expect([over.elementwiseNsPerTokenHidden, over.memoryGiB, over.peakTflops]).toEqual([7, 12, 0.05]);
    expect(parseSchemesFile({ rows: [row({})], rates, machine: { cores: 2 } }).rates).toBe(rates);
    expect(() => profileFromRates({ ...rates, gemm: [] }, 4)).toThrow(/'gemm' must list at least one measured GEMM rate/);
    expect(() => profileFromRates({ ...rates, p2pBandwidthBytesPerSecond: 0 }, 4)).toThrow(
      /p2pBandwidthBytesPerSecond must be a positive measured number, got 0/,
    );
  });
});
