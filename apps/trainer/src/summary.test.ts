import { describe, expect, it } from "vitest";
import type { StepMetrics } from "./metrics.js";
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
});
