import { describe, expect, it } from "vitest";
import { calibrateFixedCosts, checkProjection, machineProfile, machineRun, rankProfile, rankSpeed, type MachineMeasurements } from "./check.js";
import { project, type GptShape } from "./cost-model.js";
import { attentionEfficiencyAt, parseProfile } from "./profile.js";

const block: GptShape = { name: "block", layers: 1, hidden: 256, heads: 8, vocab: 0, ffnMultiplier: 4 };
const measured: MachineMeasurements = { name: "test box", cores: 2, matmulGflops: 200, shapedMatmulGflops: 150, attentionGflops: 50, memoryGiB: 16 };

describe("projection check", () => {
  it("builds the machine profile from measured rates", () => {
    const hw = machineProfile(measured, "unit test");
    expect(hw.peakTflops).toBeCloseTo(0.2, 12);
    expect(hw.matmulEfficiency).toBeCloseTo(0.75, 12);
    expect(hw.attentionEfficiency).toBeCloseTo(0.25, 12);
    expect(() => machineProfile({ ...measured, matmulGflops: 0 }, "x")).toThrow(/matmulGflops.*got 0/);
  });

  it("recovers known fixed costs from two P = 1 points", () => {
    const machine = machineProfile(measured, "unit test");
    const truth = { ...machine, elementwiseNsPerTokenHidden: 2.5, perLayerOverheadUs: 3000 };
    const at = (seqLen: number) => ({ seqLen, seconds: project(block, machineRun("ulysses", 1, seqLen), truth).stepSeconds });
    const c = calibrateFixedCosts(block, machine, [at(1024), at(4096)]);
    expect(c.elementwiseNsPerTokenHidden).toBeCloseTo(2.5, 6);
    expect(c.perLayerOverheadUs).toBeCloseTo(3000, 3);
    expect(() => calibrateFixedCosts(block, machine, [at(1024), at(1024)])).toThrow(/different sequence lengths/);
  });

  it("clamps negative fixed costs to zero", () => {
    const machine = machineProfile(measured, "unit test");
    const c = calibrateFixedCosts(block, machine, [
      { seqLen: 1024, seconds: 1e-6 },
      { seqLen: 2048, seconds: 2e-6 },
    ]);
    expect(c.elementwiseNsPerTokenHidden).toBe(0);
    expect(c.perLayerOverheadUs).toBe(0);
  });

  it("one core per rank up to the core count, then time-sharing: peak x cores / P, fixed costs x P / cores", () => {
    const machine = { ...machineProfile(measured, "unit test"), elementwiseNsPerTokenHidden: 1, perLayerOverheadUs: 10 };
    const link = { bandwidthGBs: 4, latencyUs: 20 };
    const two = rankProfile(machine, 2, 2, link);
    const four = rankProfile(machine, 4, 2, link);
    expect(two.peakTflops).toBeCloseTo(0.2, 12);
    expect(four.peakTflops).toBeCloseTo(0.1, 12);
    expect(two.elementwiseNsPerTokenHidden).toBe(1);
    expect(four.elementwiseNsPerTokenHidden).toBe(2);
    expect(four.perLayerOverheadUs).toBe(20);
    expect(four.devicesPerNode).toBe(4);
    expect(four.intraNode).toEqual(link);
  });

  it("compute time per rank falls as 1/P up to the core count and stays flat beyond (Ulysses, heads divisible by P)", () => {
    const machine = machineProfile(measured, "unit test");
    const fast = { bandwidthGBs: 1e9, latencyUs: 0 };
    const [one, two, four] = checkProjection(
      block,
      [1, 2, 4].map((degree) => ({ scheme: "ulysses" as const, degree, seqLen: 8192, seconds: 1 })),
      (p) => rankProfile(machine, p, 2, fast),
    );
    expect(two!.terms.matmul).toBeCloseTo(one!.terms.matmul / 2, 12);
    expect(two!.terms.attention).toBeCloseTo(one!.terms.attention / 2, 12);
    expect(four!.terms.matmul).toBeCloseTo(two!.terms.matmul, 12);
    expect(four!.terms.attention).toBeCloseTo(two!.terms.attention, 12);
    expect(one!.errorPercent).toBeCloseTo(100 * (one!.predictedSeconds - 1), 9);
  });

  it("attention efficiency by sequence length: log2 interpolation, ends held, validated", () => {
    const hw = machineProfile({ ...measured, attentionGflopsBySeq: [{ seqLen: 8192, gflops: 100 }, { seqLen: 2048, gflops: 50 }] }, "unit test");
    expect(hw.attentionEfficiencyBySeq).toEqual([{ seqLen: 2048, efficiency: 0.25 }, { seqLen: 8192, efficiency: 0.5 }]);
    expect(attentionEfficiencyAt(hw, 1024)).toBe(0.25);
    expect(attentionEfficiencyAt(hw, 4096)).toBeCloseTo(0.375, 12);
    expect(attentionEfficiencyAt(hw, 65536)).toBe(0.5);
    expect(attentionEfficiencyAt({ ...hw, attentionEfficiencyBySeq: undefined }, 4096)).toBe(hw.attentionEfficiency);
    // The projection's attention term follows the table.
    const at = (seqLen: number, profile = hw) => checkProjection(block, [{ scheme: "ulysses", degree: 1, seqLen, seconds: 1 }], () => profile)[0]!.terms.attention;
    const flat = { ...hw, attentionEfficiencyBySeq: undefined, attentionEfficiency: 0.5 };
    expect(at(8192)).toBeCloseTo(at(8192, flat), 12);
    expect(at(2048)).toBeCloseTo(2 * at(2048, flat), 12);
    expect(() => parseProfile({ ...hw, attentionEfficiencyBySeq: [{ seqLen: 1024, efficiency: 2 }] }, "p.json")).toThrow(/attentionEfficiencyBySeq\[0\].efficiency.*<= 1, got 2/);
  });

  it("contention: a rank keeps `shared` of one thread's speed when every core is busy, and C/P of a core beyond", () => {
    expect(rankSpeed(1, 2, 0.7)).toBe(1);
    expect(rankSpeed(2, 2, 0.7)).toBeCloseTo(0.7, 12);
    expect(rankSpeed(4, 2, 0.7)).toBeCloseTo(0.35, 12);
    expect(rankSpeed(3, 5, 0.6)).toBeCloseTo(0.8, 12);
    const core = { ...machineProfile(measured, "unit test"), perLayerOverheadUs: 70 };
    const p4 = rankProfile(core, 4, 2, { bandwidthGBs: 1, latencyUs: 0 }, 0.7);
    // peak = machine rate / P, the machine rate being 2 x 0.7 x the one-thread rate
    expect(p4.peakTflops).toBeCloseTo((2 * 0.7 * core.peakTflops) / 4, 12);
    expect(p4.perLayerOverheadUs).toBeCloseTo(200, 9);
    expect(() => rankSpeed(2, 2, 1.5)).toThrow(/shared must be in \(0, 1\], got 1.5/);
  });
});
