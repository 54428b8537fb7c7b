import path from "node:path";
import { describe, expect, it } from "vitest";
import { maxRelativeDifference } from "./measure-children.js";
import { parsePaperFlags, parseRerender } from "./paper-flags.js";
import { blockStepFlops, formulaForwardBytes } from "./paper-tables.js";

const flags = parsePaperFlags([])!;

describe("bench:paper arithmetic", () => {
  it("byte formulas: Ulysses constant under weak scaling, all-gather-KV growing with P", () => {
    const u = [2, 4, 8].map((p) => formulaForwardBytes("ulysses", p, 2048 * p, flags));
    const a = [2, 4, 8].map((p) => formulaForwardBytes("allgather", p, 2048 * p, flags));
    // 4·(P−1)/P·(N/P)·h·4 with h = 256: (P−1)/P · 8 MiB
    expect(u).toEqual([4, 6, 7].map((m) => m * 2 ** 20));
    // (P−1)·(N/P)·2·h·4: (P−1) · 4 MiB
    expect(a).toEqual([4, 12, 28].map((m) => m * 2 ** 20));
    expect(formulaForwardBytes("ulysses", 1, 4096, flags)).toBe(0);
  });

  it("block step FLOPs: 3 x (24·N·h² + 4·h·N(N+1)/2), causal attention over its pairs", () => {
    expect(blockStepFlops(flags, 4096)).toBe(3 * (24 * 4096 * 256 * 256 + 4 * 256 * ((4096 * 4097) / 2)));
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
    expect(() => parsePaperFlags(["--bogus"])).toThrow(/bench:paper: Unknown option '--bogus'/);
  });
});

describe("bestRates", () => {
  it("keeps the better measurement of every rate", async () => {
    const { bestRates } = await import("./measure-children.js");
    const base = {
      threads: 2,
      matmulGflops: 100,
      matmulOneThreadGflops: 60,
      gemmGflops: 30,
      gemmRows: 4096,
      attention: [
        { seq: 2048, seconds: 1, gflops: 10 },
        { seq: 4096, seconds: 2, gflops: 20 },
      ],
      attentionGflops: 20,
    };
    const other = {
      ...base,
      matmulGflops: 90,
      matmulOneThreadGflops: 70,
      attention: [
        { seq: 2048, seconds: 0.5, gflops: 20 },
        { seq: 4096, seconds: 3, gflops: 15 },
      ],
      attentionGflops: 15,
    };
    const best = bestRates(base, other);
    expect([best.matmulGflops, best.matmulOneThreadGflops, best.gemmGflops]).toEqual([100, 70, 30]);
    expect(best.attention.map((a) => a.gflops)).toEqual([20, 20]);
    expect(best.attentionGflops).toBe(20);
  });
});

describe("bench:paper flags", () => {
  it("reads flag values, quick sizes and errors", () => {
    const f = parsePaperFlags(["--quick", "--seqs", "1024,2048", "--timed-steps", "5", "--skip", "maxseq, convergence"])!;
    expect(f.quick).toBe(true);
    expect(f.seqs).toEqual([1024, 2048]);
    expect(f.timedSteps).toBe(5);
    expect([...f.skip]).toEqual(["maxseq", "convergence"]);
    expect(f.calibrationSeqs).toEqual([512, 1024, 2048]);
    expect(parsePaperFlags(["--help"])).toBeNull();
    expect(parsePaperFlags(["-h", "--bogus"])).toBeNull();
    expect(parsePaperFlags(["--", "--hidden", "128", "--out", "x"])).toMatchObject({ hidden: 128, out: "x" });
    expect(() => parsePaperFlags(["--out"])).toThrow("Option '--out <value>' argument missing");
    expect(() => parsePaperFlags(["--seqs", "1024,x"])).toThrow("--seqs: expected positive integers separated by commas, got '1024,x'");
    expect(() => parsePaperFlags(["--hidden", "0"])).toThrow("--hidden: expected a positive integer, got '0'");
    expect(() => parsePaperFlags(["--quick=yes"])).toThrow("--quick");
    expect(() => parsePaperFlags(["stray"])).toThrow("Unexpected argument 'stray'");
  });

  it("--rerender [FILE]: the recorded paper.json, by default the repository's", () => {
    expect(parseRerender(["--rerender"], "/repo")).toBe(path.resolve("/repo/bench-results/paper.json"));
    expect(parseRerender(["--rerender", "/runs/paper.json"], "/repo")).toBe("/runs/paper.json");
    expect(parseRerender(["--rerender", "--help"], "/repo")).toBeNull();
    expect(() => parsePaperFlags(["--rerender"])).toThrow("Unknown option '--rerender'");
    expect(() => parseRerender(["--rerender", "a.json", "b.json"], "/repo")).toThrow(
      "--rerender takes at most one FILE and no other flag, got '--rerender a.json b.json'",
    );
  });
});
