import { describe, expect, it } from "vitest";
import { lineChart, type ChartOptions } from "./line-chart.js";

const base: ChartOptions = { title: "t", xLabel: "x", yLabel: "y", legend: false };
/** The `d` of every drawn line (paths that are not the crosses). */
const lines = (svg: string) => [...svg.matchAll(/<path d="([^"]+)" fill="none"/g)].map((m) => m[1]);
const texts = (svg: string) => [...svg.matchAll(/<text[^>]*>([^<]*)<\/text>/g)].map((m) => m[1]);

// Without legend or right axis the plot spans x 70..700 and y 40..365 of 720 x 420.
describe("lineChart", () => {
  it("maps points linearly onto the plot, y from 0 to a round top", () => {
    const svg = lineChart(
      [
        {
          name: "s",
          points: [
            { x: 1, y: 0 },
            { x: 2, y: 5 },
            { x: 4, y: 10 },
          ],
        },
      ],
      base,
    );
    expect(svg.startsWith("<svg")).toBe(true);
    expect(svg.endsWith("</svg>\n")).toBe(true);
    // x 1..4 over 630 px; y 0..10 over 325 px
    expect(lines(svg)).toEqual(["M70.0 365.0L280.0 202.5L700.0 40.0"]);
    expect(svg.match(/<circle /g)?.length).toBe(3);
    expect(texts(svg)).toEqual(expect.arrayContaining(["0", "2", "4", "6", "8", "10"]));
  });

  it("a log2 x axis with ticks at the data's x values and their labels", () => {
    const svg = lineChart([{ name: "s", points: [1024, 2048, 4096].map((x) => ({ x, y: 1 })) }], { ...base, logX: true, formatX: (x) => `${x / 1024}K` });
    expect(lines(svg)[0]).toBe("M70.0 40.0L385.0 40.0L700.0 40.0");
    expect(texts(svg)).toEqual(expect.arrayContaining(["1K", "2K", "4K"]));
  });

  it("breaks the line at a missing value and marks it on the x axis", () => {
    const svg = lineChart(
      [
        {
          name: "s",
          points: [
            { x: 1, y: 2 },
            { x: 2, y: null },
            { x: 3, y: 2 },
            { x: 4, y: Number.NaN },
            { x: 5, y: 2 },
          ],
        },
      ],
      { ...base, markers: false },
    );
    expect(lines(svg)).toEqual(["M70.0 40.0M385.0 40.0M700.0 40.0"]);
    expect(svg.match(/<path d="[^"]+" stroke=/g)?.length).toBe(2); // two crosses
    expect(svg).not.toContain("<circle");
  });

  it("a right axis over its own range, a legend and several series", () => {
    const svg = lineChart(
      [
        {
          name: "loss",
          points: [
            { x: 0, y: 4 },
            { x: 10, y: 2 },
          ],
        },
        {
          name: "accuracy",
          axis: "right",
          dash: "6 3",
          points: [
            { x: 0, y: 0 },
            { x: 10, y: 0.5 },
          ],
        },
      ],
      { ...base, legend: true, right: { label: "accuracy", min: 0, max: 1, ticks: [0, 0.5, 1], format: (a) => `${a * 100}%` } },
    );
    // right margin 20 + 50 + 160: plot x 70..490; left y 0..4, right y 0..1
    expect(lines(svg)).toEqual(["M70.0 40.0L490.0 202.5", "M70.0 365.0L490.0 202.5"]);
    expect(texts(svg)).toEqual(expect.arrayContaining(["0%", "50%", "100%", "loss", "accuracy"]));
    expect(svg).toContain('stroke="#d62728" stroke-width="2" stroke-dasharray="6 3"');
  });

  it("escapes text and names bad input", () => {
    expect(lineChart([], { ...base, title: "a < b & c" })).toContain("a &lt; b &amp; c");
    expect(() => lineChart([{ name: "s", points: [{ x: 0, y: 1 }] }], { ...base, logX: true })).toThrow(
      "series 's' has x = 0, not a positive number (log x axis)",
    );
    expect(() => lineChart([{ name: "acc", axis: "right", points: [] }], base)).toThrow("series 'acc' is on the right axis but options.right is not set");
    expect(() => lineChart([], { ...base, width: 50 })).toThrow("50 x 420 leaves no room for the plot");
  });
});
