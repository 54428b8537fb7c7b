import { describe, expect, it } from "vitest";
import { collectiveCost } from "./collective-cost.js";
import { gptForwardFlops } from "@ulysses/measure";
import { gptDimensionsOf, parameterCount, project, type GptShape, type RunShape } from "./cost-model.js";
import { parseProfile, type HardwareProfile } from "./profile.js";

const hw: HardwareProfile = parseProfile({
  name: "test",
  devicesPerNode: 4,
  peakTflops: 100,
  matmulEfficiency: 0.5,
  attentionEfficiency: 0.25,
  memoryGiB: 80,
  bytesPerElement: 2,
  intraNode: { bandwidthGBs: 100, latencyUs: 0 },
  interNode: { bandwidthGBs: 10, latencyUs: 0 },
});

const gpt: GptShape = { name: "t", layers: 2, hidden: 1024, heads: 16, vocab: 1000, ffnMultiplier: 4 };

describe("cost model", () => {
  it("counts GPT-2 small's parameters (12 layers, 768 hidden, 50257 vocab: 85M blocks + 38.6M embedding)", () => {
    const m: GptShape = { name: "gpt2", layers: 12, hidden: 768, heads: 12, vocab: 50257, ffnMultiplier: 4 };
    // 12 * 12 * 768^2 = 84,934,656 ; 50257 * 768 = 38,597,376
    expect(parameterCount(m)).toBe(84_934_656 + 38_597_376);
  });

  it("forward FLOPs follow 24·N·h² per layer plus the head, and 4·h per attended pair: N² full, N(N+1)/2 causal", () => {
    const full = gptForwardFlops(gptDimensionsOf(gpt), 2048, false);
    expect(full.matmul).toBe(2 * 24 * 2048 * 1024 * 1024 + 2 * 2048 * 1024 * 1000);
    expect(full.attention).toBe(2 * 4 * 2048 * 2048 * 1024);
    expect(gptForwardFlops(gptDimensionsOf(gpt), 2048, true).attention).toBe(2 * 4 * ((2048 * 2049) / 2) * 1024);
  });

  it("model FLOPs of a step: 3 forwards per sequence, every replica, every micro-step", () => {
    const run: RunShape = {
      scheme: "ulysses",
      devices: 4,
      degree: 2,
      seqLen: 2048,
      microBatch: 1,
      globalBatchTokens: 4 * 2048,
      zeroStage: 0,
      activationCheckpointing: true,
      causal: true,
    };
    const p = project(gpt, run, hw);
    // 2 replicas x 1 sequence per micro-step, 2 micro-steps; recomputation (checkpointing) is not model FLOPs
    expect(p.accumulation).toBe(2);
    const perSequence = 2 * 24 * 2048 * 1024 * 1024 + 2 * 2048 * 1024 * 1000 + 2 * 4 * ((2048 * 2049) / 2) * 1024;
    expect(p.modelFlops).toBe(4 * 3 * perSequence);
  });

  it("all-to-all inside a node: (P-1)/P of the data at the intra-node bandwidth", () => {
    const c = collectiveCost("allToAll", 4, 4e9, hw);
    expect(c.bytesSent).toBe(3e9);
    expect(c.seconds).toBeCloseTo(3e9 / 100e9, 12);
  });

  it("all-to-all across nodes is limited by the off-node chunks on the slow link", () => {
    const c = collectiveCost("allToAll", 8, 8e9, hw);
    // 3 peers on the node (3 GB at 100 GB/s = 0.03 s), 4 off the node (4 GB at 10 GB/s = 0.4 s)
    expect(c.seconds).toBeCloseTo(0.4, 12);
  });

  it("Ulysses sends 8·(P-1)/P·(N/P)·h·bytes per layer; Megatron-SP 8·(P-1)·(N/P)·h·bytes", () => {
    const base: Omit<RunShape, "scheme"> = {
      devices: 4,
      degree: 4,
      seqLen: 4096,
      microBatch: 1,
      globalBatchTokens: 1,
      zeroStage: 0,
      activationCheckpointing: false,
      causal: true,
    };
    const u = project(gpt, { ...base, scheme: "ulysses" }, hw);
    const m = project(gpt, { ...base, scheme: "megatron" }, hw);
    const shard = (4096 / 4) * 1024 * 2;
    expect(u.parallelBytesPerDevice).toBeCloseTo(2 * 8 * (3 / 4) * shard, 6);
    expect(m.parallelBytesPerDevice).toBeCloseTo(2 * 8 * 3 * shard, 6);
    // The ratio is P: Megatron moves P times the bytes of Ulysses.
    expect(m.parallelBytesPerDevice / u.parallelBytesPerDevice).toBeCloseTo(4, 9);
  });

  it("Ulysses bytes per device stay constant when N and P grow together", () => {
    const run = (p: number): RunShape => ({
      scheme: "ulysses",
      devices: p,
      degree: p,
      seqLen: 1024 * p,
      microBatch: 1,
      globalBatchTokens: 1,
      zeroStage: 0,
      activationCheckpointing: false,
      causal: true,
    });
    const b2 = project(gpt, run(2), hw).parallelBytesPerDevice;
    const b4 = project(gpt, run(4), hw).parallelBytesPerDevice;
    // (P-1)/P grows from 1/2 to 3/4; the per-rank shard is fixed.
    expect(b4 / b2).toBeCloseTo(1.5, 9);
  });

  it("flags out-of-memory and validates degrees", () => {
    const tiny = parseProfile({ ...hw, memoryGiB: 0.001 });
    const r: RunShape = {
      scheme: "ulysses",
      devices: 4,
      degree: 4,
      seqLen: 4096,
      microBatch: 1,
      globalBatchTokens: 1,
      zeroStage: 0,
      activationCheckpointing: true,
      causal: true,
    };
    expect(project(gpt, r, tiny).outOfMemory).toBe(true);
    expect(project(gpt, r, hw).outOfMemory).toBe(false);
    expect(() => project(gpt, { ...r, degree: 3 }, hw)).toThrow(/degree must divide devices/);
    expect(() => project(gpt, { ...r, devices: 32, degree: 32 }, hw)).toThrow(/exceeds the 16 heads/);
  });

  it("rejects bad profiles with the offending key", () => {
    expect(() => parseProfile({ ...hw, matmulEfficiency: 1.5 }, "p.json")).toThrow(/p.json: 'matmulEfficiency' .* <= 1, got 1.5/);
    expect(() => parseProfile({ ...hw, intraNode: { bandwidthGBs: -1, latencyUs: 0 } }, "p.json")).toThrow(/intraNode.bandwidthGBs/);
    expect(() => parseProfile({ ...hw, sources: { peakTflops: 312 } }, "p.json")).toThrow(/p.json: 'sources.peakTflops' must be a string, got 312/);
    expect(parseProfile({ ...hw, sources: { peakTflops: "datasheet" } }).sources).toEqual({ peakTflops: "datasheet" });
  });

  it("fused q, k, v (one all-to-all of 3x the bytes): the same bytes, half the latencies", () => {
    const slow = { ...hw, intraNode: { bandwidthGBs: 100, latencyUs: 50 } };
    const run: RunShape = {
      scheme: "ulysses",
      devices: 4,
      degree: 4,
      seqLen: 8192,
      microBatch: 1,
      globalBatchTokens: 8192,
      zeroStage: 0,
      activationCheckpointing: false,
      causal: true,
    };
    const three = project(gpt, run, slow);
    const one = project(gpt, { ...run, fusedQkv: true }, slow);
    expect(one.parallelBytesPerDevice).toBeCloseTo(three.parallelBytesPerDevice, 6);
    // 2 layers x (8 - 4) fewer all-to-alls x 50 µs
    expect(three.parallelCommSeconds - one.parallelCommSeconds).toBeCloseTo(2 * 4 * 50e-6, 12);
    const checkpointed = { ...run, activationCheckpointing: true };
    expect(project(gpt, checkpointed, slow).parallelCommSeconds - project(gpt, { ...checkpointed, fusedQkv: true }, slow).parallelCommSeconds).toBeCloseTo(
      2 * 6 * 50e-6,
      12,
    );
  });
});
