import { describe, expect, it } from "vitest";
import { calibrateFixedCosts, checkProjection, machineProfile, machineRun, rankProfile, rankSpeed, type MachineMeasurements } from "./check.js";
import { project, type GptShape } from "./cost-model.js";
import { attentionEfficiencyAt, elementwiseNsAt, parseProfile } from "./profile.js";

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

  it("recovers a known elementwise table from P = 1 points, with or without the measured attention time", () => {
    const machine = machineProfile(measured, "unit test");
    const table = [
      { tokens: 1024, nsPerTokenHidden: 2 },
      { tokens: 4096, nsPerTokenHidden: 3 },
      { tokens: 16384, nsPerTokenHidden: 5 },
    ];
    const truth = { ...machine, elementwiseNsByTokens: table };
    const at = (seqLen: number) => ({ seqLen, seconds: project(block, machineRun("ulysses", 1, seqLen), truth).stepSeconds });
    const c = calibrateFixedCosts(block, machine, [at(16384), at(1024), at(4096)]);
    expect(c.elementwiseNsByTokens.map((r) => r.tokens)).toEqual([1024, 4096, 16384]);
    c.elementwiseNsByTokens.forEach((r, i) => expect(r.nsPerTokenHidden).toBeCloseTo(table[i]!.nsPerTokenHidden, 9));
    // Residual at 1024 tokens: 3 passes x 1 layer x 1024 x 256 x 2 ns.
    expect(c.residuals[1]).toBeCloseTo(3 * 1024 * 256 * 2e-9, 12);
    // A measured attention time replaces the attention term: 10 ms more attention leaves 10 ms less residual.
    const attention = checkProjection(block, [{ scheme: "ulysses", degree: 1, seqLen: 4096, seconds: 1 }], () => machine)[0]!.terms.attention;
    const shifted = calibrateFixedCosts(block, machine, [{ ...at(4096), attentionSeconds: attention + 0.01 }]);
    expect(shifted.residuals[0]).toBeCloseTo(c.residuals[2]! - 0.01, 12);
    expect(() => calibrateFixedCosts(block, machine, [at(1024), at(1024)])).toThrow(/its own sequence length, got 1024 twice/);
    expect(() => calibrateFixedCosts(block, machine, [])).toThrow(/at least one P = 1 point/);
  });

  it("negative residuals count as zero", () => {
    const machine = machineProfile(measured, "unit test");
    const c = calibrateFixedCosts(block, machine, [
      { seqLen: 1024, seconds: 1e-6 },
      { seqLen: 2048, seconds: 2e-6 },
    ]);
    expect(c.elementwiseNsByTokens).toEqual([
      { tokens: 1024, nsPerTokenHidden: 0 },
      { tokens: 2048, nsPerTokenHidden: 0 },
    ]);
  });

  it("the elementwise table: log2 interpolation in the tokens per device, ends held, validated; replaces the single number", () => {
    const hw = parseProfile(
      {
        ...machineProfile(measured, "unit test"),
        elementwiseNsPerTokenHidden: 99,
        elementwiseNsByTokens: [
          { tokens: 8192, nsPerTokenHidden: 4 },
          { tokens: 2048, nsPerTokenHidden: 2 },
        ],
      },
      "p.json",
    );
    expect(hw.elementwiseNsByTokens).toEqual([
      { tokens: 2048, nsPerTokenHidden: 2 },
      { tokens: 8192, nsPerTokenHidden: 4 },
    ]);
    expect(elementwiseNsAt(hw, 1024)).toBe(2);
    expect(elementwiseNsAt(hw, 4096)).toBeCloseTo(3, 12);
    expect(elementwiseNsAt(hw, 1 << 20)).toBe(4);
    expect(elementwiseNsAt({ ...hw, elementwiseNsByTokens: undefined }, 4096)).toBe(99);
    // The cost model reads it at b·N/d tokens: P = 2 at N = 8192 uses the 4096-token value.
    const fixed = (degree: number) => checkProjection(block, [{ scheme: "ulysses", degree, seqLen: 8192, seconds: 1 }], () => hw)[0]!.terms.fixed;
    expect(fixed(2)).toBeCloseTo(3 * 4096 * 256 * 3e-9, 12);
    expect(fixed(1)).toBeCloseTo(3 * 8192 * 256 * 4e-9, 12);
    expect(() => parseProfile({ ...hw, elementwiseNsByTokens: [{ tokens: 0, nsPerTokenHidden: 1 }] }, "p.json")).toThrow(
      /elementwiseNsByTokens\[0\].tokens' must be a positive number, got 0/,
    );
    expect(() => parseProfile({ ...hw, elementwiseNsByTokens: [{ tokens: 4, nsPerTokenHidden: -1 }] }, "p.json")).toThrow(
      /elementwiseNsByTokens\[0\].nsPerTokenHidden' must be a non-negative number, got -1/,
    );
  });

  it("rank profile: the peak of one core, efficiencies from the rates measured on the ranks, fixed costs / the rank's speed", () => {
    const machine = {
      ...machineProfile(measured, "unit test"),
      elementwiseNsPerTokenHidden: 1,
      perLayerOverheadUs: 10,
      elementwiseNsByTokens: [{ tokens: 1024, nsPerTokenHidden: 3 }],
    };
    const link = { bandwidthGBs: 4, latencyUs: 20 };
    // 4 ranks time-sharing 2 cores: each gets 60 of the 150 GFLOP/s one rank alone gets on the GEMMs.
    const four = rankProfile(
      machine,
      4,
      2,
      link,
      {
        shapedMatmulGflops: 60,
        attentionGflopsBySeq: [
          { seqLen: 8192, gflops: 40 },
          { seqLen: 2048, gflops: 20 },
        ],
      },
      150,
    );
    expect(four.peakTflops).toBe(machine.peakTflops);
    expect(four.matmulEfficiency).toBeCloseTo(60 / 200, 12);
    expect(four.attentionEfficiencyBySeq).toEqual([
      { seqLen: 2048, efficiency: 0.1 },
      { seqLen: 8192, efficiency: 0.2 },
    ]);
    expect(four.attentionEfficiency).toBeCloseTo(0.2, 12);
    expect(four.elementwiseNsPerTokenHidden).toBeCloseTo(2.5, 12);
    expect(four.perLayerOverheadUs).toBeCloseTo(25, 12);
    expect(four.elementwiseNsByTokens).toEqual([{ tokens: 1024, nsPerTokenHidden: 7.5 }]);
    expect(four.devicesPerNode).toBe(4);
    expect(four.intraNode).toEqual(link);
    expect(four.interNode).toEqual(link);
    expect(four.name).toMatch(/4 ranks time-sharing 2 cores/);
    expect(() => rankProfile(machine, 2, 2, link, { shapedMatmulGflops: 100, attentionGflopsBySeq: [] }, 150)).toThrow(/attentionGflopsBySeq is empty/);
    expect(() => rankProfile(machine, 2, 2, link, { shapedMatmulGflops: 100, attentionGflopsBySeq: [{ seqLen: 1024, gflops: Number.NaN }] }, 150)).toThrow(
      /attention rate at N = 1024 must be a positive measured rate, got NaN/,
    );
  });

  it("the prediction's terms follow the rank's measured rates (Ulysses: 1/P of the GEMMs, H/P of the heads)", () => {
    const machine = machineProfile(measured, "unit test");
    const fast = { bandwidthGBs: 1e9, latencyUs: 0 };
    const ranks = {
      1: { shapedMatmulGflops: 150, gflops: 50 },
      2: { shapedMatmulGflops: 120, gflops: 40 },
      4: { shapedMatmulGflops: 60, gflops: 20 },
    } as Record<number, { shapedMatmulGflops: number; gflops: number }>;
    const [one, two, four] = checkProjection(
      block,
      [1, 2, 4].map((degree) => ({ scheme: "ulysses" as const, degree, seqLen: 8192, seconds: 1 })),
      (p) =>
        rankProfile(
          machine,
          p,
          2,
          fast,
          { shapedMatmulGflops: ranks[p]!.shapedMatmulGflops, attentionGflopsBySeq: [{ seqLen: 8192, gflops: ranks[p]!.gflops }] },
          150,
        ),
    );
    // matmul: 3 x 24·N·h² / P at the rank's GEMM rate
    expect(one!.terms.matmul).toBeCloseTo((3 * 24 * 8192 * 256 * 256) / 150e9, 12);
    expect(two!.terms.matmul).toBeCloseTo((3 * 24 * 8192 * 256 * 256) / 2 / 120e9, 12);
    expect(four!.terms.matmul).toBeCloseTo((3 * 24 * 8192 * 256 * 256) / 4 / 60e9, 12);
    // attention: 3 x 4·h per causal pair (N(N+1)/2 of them) on H/P of the heads at the rank's attention rate
    expect(two!.terms.attention).toBeCloseTo((3 * 4 * ((8192 * 8193) / 2) * 256) / 2 / 40e9, 12);
    expect(four!.terms.attention).toBeCloseTo((3 * 4 * ((8192 * 8193) / 2) * 256) / 4 / 20e9, 12);
    expect(one!.errorPercent).toBeCloseTo(100 * (one!.predictedSeconds - 1), 9);
  });

  it("attention efficiency by sequence length: log2 interpolation, ends held, validated", () => {
    const hw = machineProfile(
      {
        ...measured,
        attentionGflopsBySeq: [
          { seqLen: 8192, gflops: 100 },
          { seqLen: 2048, gflops: 50 },
        ],
      },
      "unit test",
    );
    expect(hw.attentionEfficiencyBySeq).toEqual([
      { seqLen: 2048, efficiency: 0.25 },
      { seqLen: 8192, efficiency: 0.5 },
    ]);
    expect(attentionEfficiencyAt(hw, 1024)).toBe(0.25);
    expect(attentionEfficiencyAt(hw, 4096)).toBeCloseTo(0.375, 12);
    expect(attentionEfficiencyAt(hw, 65536)).toBe(0.5);
    expect(attentionEfficiencyAt({ ...hw, attentionEfficiencyBySeq: undefined }, 4096)).toBe(hw.attentionEfficiency);
    // The projection's attention term follows the table.
    const at = (seqLen: number, profile = hw) =>
      checkProjection(block, [{ scheme: "ulysses", degree: 1, seqLen, seconds: 1 }], () => profile)[0]!.terms.attention;
    const flat = { ...hw, attentionEfficiencyBySeq: undefined, attentionEfficiency: 0.5 };
    expect(at(8192)).toBeCloseTo(at(8192, flat), 12);
    expect(at(2048)).toBeCloseTo(2 * at(2048, flat), 12);
    expect(() => parseProfile({ ...hw, attentionEfficiencyBySeq: [{ seqLen: 1024, efficiency: 2 }] }, "p.json")).toThrow(
      /attentionEfficiencyBySeq\[0\].efficiency.*<= 1, got 2/,
    );
  });

  it("a rank's speed for the fixed costs: its GEMM rate over one rank's alone, capped at 1", () => {
    expect(rankSpeed(150, 150)).toBe(1);
    expect(rankSpeed(105, 150)).toBeCloseTo(0.7, 12);
    expect(rankSpeed(160, 150)).toBe(1);
    expect(() => rankSpeed(0, 150)).toThrow(/GEMM rates must be positive, got 0 and 150/);
  });
});
