import { describe, expect, it } from "vitest";
import { maxRelativeDifference, quadraticRate } from "./measure-children.js";
import { parsePaperFlags } from "./paper-flags.js";
import { blockStepFlops, formulaForwardBytes } from "./paper-tables.js";

const flags = parsePaperFlags([])!;

describe("bench:paper arithmetic", () => {
  it("fits the N² term of attention time through two points", () => {
    const h = 256;
    const rate = 40e9; // useful FLOP/s of the N² part
    const A = (6 * h) / rate;
    const B = 2e-5; // seconds per query token
    const at = (seq: number) => ({ seq, seconds: A * seq * seq + B * seq, gflops: (6 * h * seq * seq) / (A * seq * seq + B * seq) / 1e9 });
    expect(quadraticRate([at(2048), at(8192)], h)).toBeCloseTo(40, 9);
    // No N² growth measured (noise): the better measured rate.
    expect(quadraticRate([{ seq: 1024, seconds: 2, gflops: 3 }, { seq: 2048, seconds: 3, gflops: 7 }], h)).toBe(7);
  });

  it("byte formulas: Ulysses constant under weak scaling, all-gather-KV growing with P", () => {
    const u = [2, 4, 8].map((p) => formulaForwardBytes("ulysses", p, 2048 * p, flags));
    const a = [2, 4, 8].map((p) => formulaForwardBytes("allgather", p, 2048 * p, flags));
    // 4·(P−1)/P·(N/P)·h·4 with h = 256: (P−1)/P · 8 MiB
    expect(u).toEqual([4, 6, 7].map((m) => m * 2 ** 20));
    // (P−1)·(N/P)·2·h·4: (P−1) · 4 MiB
    expect(a).toEqual([4, 12, 28].map((m) => m * 2 ** 20));
    expect(formulaForwardBytes("ulysses", 1, 4096, flags)).toBe(0);
  });

  it("block step FLOPs: 3 x (24·N·h² + 2·N²·h)", () => {
    expect(blockStepFlops(flags, 4096)).toBe(3 * (24 * 4096 * 256 * 256 + 2 * 4096 * 4096 * 256));
  });

  it("max relative difference of loss curves", () => {
    expect(maxRelativeDifference([2, 4, 8], [2, 4.004, 8])).toBeCloseTo(1e-3, 12);
    expect(maxRelativeDifference([1, 1], [1])).toBe(0);
  });

  it("flags: quick sizes, lists and errors", () => {
    expect(parsePaperFlags(["--quick"])!.seqs).toEqual([2048, 4096]);
    expect(parsePaperFlags(["--seqs", "1024,2048", "--skip", "maxseq,comm"])).toMatchObject({ seqs: [1024, 2048] });
    expect(parsePaperFlags(["--help"])).toBeNull();
    expect(() => parsePaperFlags(["--seqs", "1k"])).toThrow(/--seqs: expected positive integers.*'1k'/);
    expect(() => parsePaperFlags(["--bogus"])).toThrow(/unknown flag '--bogus'/);
  });
});
