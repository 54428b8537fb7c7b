import { describe, expect, it } from "vitest";
import type { StepMetrics } from "./metrics-log.js";
import { formatTable, summaryRows } from "./summary.js";

const row = (step: number, stepMs: number, mfu: number): StepMetrics => ({
  step,
  time: new Date(0).toISOString(),
  loss: 5 - step,
  lr: 0,
  gradNorm: 0,
  tokensPerSec: 1000 / stepMs,
  stepMs,
  computeMs: stepMs - 1,
  commMs: 1,
  commBytesPerRank: 2048,
  peakRssBytes: 3 * 2 ** 20,
  mfu,
});

describe("summary", () => {
  it("formats a two-column table", () => {
    expect(
      formatTable([
        ["a", "1"],
        ["bb", "22"],
      ]),
    ).toBe("+----+----+\n| a  | 1  |\n| bb | 22 |\n+----+----+");
  });

  it("averages the timings after the first step and names the steps", () => {
    // steps 2..4 are timed: step ms 10, 20, 30 -> 20; MFU 0.1, 0.2, 0.3 -> 20%
    const rows = new Map(summaryRows([row(1, 1000, 0.9), row(2, 10, 0.1), row(3, 20, 0.2), row(4, 30, 0.3)], { setup: "s", wallSeconds: 1.25, outDir: "/r" }));
    expect(rows.get("steps")).toBe("1..4");
    expect(rows.get("step time")).toBe("20.0 ms");
    expect(rows.get("MFU (vs ORT MatMul rate)")).toBe("20.0%");
    expect(rows.get("peak RSS")).toBe("3.0 MiB");
    expect(rows.get("comm bytes per rank per step")).toBe("2.0 KiB");
  });

  // A summary never prints an MFU above 100% (the physical ceiling): rows whose MFU against their start-up MatMul rate is 1.3 (the rate
  // was measured while the machine was busy) must be taken against a higher rate measured later, or be reported as n/a.
  const loaded = (step: number, mfu: number): StepMetrics => ({ ...row(step, 10, mfu), matmulRate: 100e9 });
  const mfuRow = (rows: [string, string][]) => new Map(rows).get("MFU (vs ORT MatMul rate)")!;
  const percents = (text: string) => [...text.matchAll(/(\d+(?:\.\d+)?)%/g)].map((match) => Number(match[1]));

  it("an MFU above 100% against the only rate measured is reported as n/a with the rate, not as a percentage", () => {
    const rows = summaryRows([loaded(1, 1.3), loaded(2, 1.3), loaded(3, 1.3)], { setup: "s", wallSeconds: 1, outDir: "/r" });
    const mfu = mfuRow(rows);
    expect(mfu).toMatch(/^n\/a: /);
    expect(mfu).toBe("n/a: the MatMul rate (100.0 GFLOP/s) was measured under load");
    expect(
      percents(mfu).every((p) => p <= 100),
      mfu,
    ).toBe(true);
    expect(new Map(rows).get("ORT MatMul rate (GFLOP/s)")).toBe("start-up 100.0");
  });

  it("the MFU is taken against the higher of the start-up and end rates, and both are printed", () => {
    // 1.3 x 100 GFLOP/s of model FLOPs against 200 GFLOP/s measured at the end: 65%
    const rows = new Map(summaryRows([loaded(1, 1.3), loaded(2, 1.3), loaded(3, 1.3)], { setup: "s", wallSeconds: 1, outDir: "/r", matmulRateEnd: 200e9 }));
    expect(rows.get("MFU (vs ORT MatMul rate)")).toBe("65.0%");
    expect(rows.get("ORT MatMul rate (GFLOP/s)")).toBe("start-up 100.0, end 200.0 (MFU vs the highest)");
  });

  it("an end rate that is still too low leaves the MFU n/a, with the rates' range", () => {
    const mfu = mfuRow(summaryRows([loaded(1, 1.3), loaded(2, 1.3)], { setup: "s", wallSeconds: 1, outDir: "/r", matmulRateEnd: 120e9 }));
    expect(mfu).toMatch(/^n\/a: .*100\.0-120\.0 GFLOP\/s/);
    expect(
      percents(mfu).every((p) => p <= 100),
      mfu,
    ).toBe(true);
  });

  it("the count of skipped bad documents is the last row's (cumulative)", () => {
    const rows = new Map(
      summaryRows(
        [
          { ...row(1, 10, 0.1), skippedDocuments: 1 },
          { ...row(2, 10, 0.1), skippedDocuments: 4 },
        ],
        { setup: "s", wallSeconds: 1, outDir: "/r" },
      ),
    );
    expect(rows.get("bad documents skipped")).toBe("4");
  });
});
