import { describe, expect, it } from "vitest";
import { lossPlotSvg, trailingMean } from "./loss-plot.js";
import type { StepMetrics } from "./metrics-log.js";

const row = (step: number, loss: number, accuracy?: number): StepMetrics => ({
  step,
  time: new Date(0).toISOString(),
  loss,
  lr: 0,
  gradNorm: 0,
  tokensPerSec: 0,
  stepMs: 0,
  computeMs: 0,
  commMs: 0,
  commBytesPerRank: 0,
  peakRssBytes: 0,
  mfu: 0,
  ...(accuracy === undefined ? {} : { accuracy }),
});
/** The drawn lines' `d` attributes. */
const lines = (svg: string) => [...svg.matchAll(/<path d="([^"]+)" fill="none"/g)].map((m) => m[1]!);

describe("loss.svg", () => {
  it("a trailing mean over the window, fewer values at the start", () => {
    expect(trailingMean([1, 3, 5, 7], 2)).toEqual([1, 2, 4, 6]);
    expect(trailingMean([2, 4], 1)).toEqual([2, 4]);
  });

  it("draws the loss through every step, from step 1 at the left edge", () => {
    const svg = lossPlotSvg(
      [1, 2, 3].map((step) => row(step, 3 - step)),
      "a < b",
    );
    expect(svg).toMatch(/^<svg/);
    expect(svg).toContain("a &lt; b");
    const [loss] = lines(svg);
    const xs = loss!
      .split(/[ML]/)
      .filter((p) => p !== "")
      .map((p) => p.split(" ")[0]);
    // plot x 70..540 (legend on the right): steps 1, 2, 3
    expect(xs).toEqual(["70.0", "305.0", "540.0"]);
    expect(svg).not.toContain("accuracy");
  });

  it("the recall accuracy on a right-hand axis in percent", () => {
    const svg = lossPlotSvg(
      [1, 2, 3, 4].map((step) => row(step, 2, step / 4)),
      "recall",
    );
    expect(lines(svg)).toHaveLength(2);
    expect(svg).toContain("accuracy (mean of 1 steps)");
    for (const label of ["0%", "25%", "50%", "75%", "100%"]) expect(svg).toContain(`>${label}</text>`);
    // the right axis narrows the plot to x 70..490; accuracy 1 at step 4 sits at its top (y 40), 0.25 at step 1 three quarters down
    expect(lines(svg)[1]).toBe("M70.0 283.8L210.0 202.5L350.0 121.3L490.0 40.0");
  });

  it("an empty run still draws the axes", () => {
    expect(lossPlotSvg([], "empty")).toContain("</svg>");
  });
});
