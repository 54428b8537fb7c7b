/**
 * loss.svg: the training loss against the step, drawn with @ulysses/measure's
 * `lineChart`, with the recall accuracy on a right-hand axis (0 to 100%) when
 * the task has one. Per-step accuracy over a few dozen queries is noisy, so
 * the chart shows its trailing mean over about a 25th of the steps.
 */
import { lineChart, type Series } from "@ulysses/measure";
import type { StepMetrics } from "./metrics-log.js";

/** Trailing mean of `window` values (fewer at the start): one output per input. */
export function trailingMean(values: readonly number[], window: number): number[] {
  let sum = 0;
  return values.map((v, i) => {
    sum += v - (i >= window ? values[i - window]! : 0);
    return sum / Math.min(i + 1, window);
  });
}

export function lossPlotSvg(metrics: readonly StepMetrics[], title: string): string {
  const series: Series[] = [{ name: "loss", color: "#1f77b4", markers: false, points: metrics.map((m) => ({ x: m.step, y: m.loss })) }];
  const withAccuracy = metrics.filter((m) => m.accuracy !== undefined);
  const window = Math.max(1, Math.floor(withAccuracy.length / 25));
  if (withAccuracy.length > 0) {
    const smoothed = trailingMean(
      withAccuracy.map((m) => m.accuracy!),
      window,
    );
    series.push({ name: "accuracy", color: "#d62728", axis: "right", markers: false, points: withAccuracy.map((m, i) => ({ x: m.step, y: smoothed[i]! })) });
  }
  return lineChart(series, {
    title,
    xLabel: "step",
    yLabel: "loss",
    ...(withAccuracy.length > 0
      ? { right: { label: `accuracy (mean of ${window} steps)`, min: 0, max: 1, ticks: [0, 0.25, 0.5, 0.75, 1], format: (a: number) => `${a * 100}%` } }
      : {}),
  });
}
