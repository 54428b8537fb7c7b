/**
 * loss.svg: the training loss against the step as a hand-written SVG line
 * chart (axes, ticks, grid), with the recall accuracy on a right-hand axis
 * when the task has one. No dependencies.
 */
import type { StepMetrics } from "./metrics.js";

/** About `count` round tick values covering [low, high]. */
export function niceTicks(low: number, high: number, count = 5): number[] {
  if (!(high > low)) return [low];
  const raw = (high - low) / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((f) => f * magnitude).find((s) => s >= raw) ?? raw;
  const ticks: number[] = [];
  for (let t = Math.ceil(low / step) * step; t <= high + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

function escape(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

export function lossPlotSvg(metrics: readonly StepMetrics[], title: string): string {
  const width = 720;
  const height = 400;
  const left = 64;
  const right = 64;
  const top = 40;
  const bottom = 48;
  const plotW = width - left - right;
  const plotH = height - top - bottom;
  const steps = metrics.map((m) => m.step);
  const losses = metrics.map((m) => m.loss);
  const xMin = Math.min(...steps, 1);
  const xMax = Math.max(...steps, xMin + 1);
  const yMin = Math.min(0, ...losses);
  const yMax = Math.max(...losses, yMin + 1e-6) * 1.05;
  const x = (s: number) => left + ((s - xMin) / (xMax - xMin)) * plotW;
  const y = (v: number) => top + plotH - ((v - yMin) / (yMax - yMin)) * plotH;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="${width / 2}" y="22" text-anchor="middle" font-size="14">${escape(title)}</text>`,
  ];
  for (const t of niceTicks(yMin, yMax)) {
    out.push(`<line x1="${left}" x2="${left + plotW}" y1="${y(t).toFixed(1)}" y2="${y(t).toFixed(1)}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${left - 6}" y="${(y(t) + 4).toFixed(1)}" text-anchor="end">${t}</text>`);
  }
  for (const t of niceTicks(xMin, xMax)) {
    out.push(`<line x1="${x(t).toFixed(1)}" x2="${x(t).toFixed(1)}" y1="${top + plotH}" y2="${top + plotH + 5}" stroke="black"/>`);
    out.push(`<text x="${x(t).toFixed(1)}" y="${top + plotH + 18}" text-anchor="middle">${t}</text>`);
  }
  out.push(`<rect x="${left}" y="${top}" width="${plotW}" height="${plotH}" fill="none" stroke="black"/>`);
  out.push(`<text x="${left + plotW / 2}" y="${height - 10}" text-anchor="middle">step</text>`);
  out.push(`<text transform="translate(16 ${top + plotH / 2}) rotate(-90)" text-anchor="middle" fill="#1f77b4">loss</text>`);
  if (metrics.length > 0) {
    const points = metrics.map((m) => `${x(m.step).toFixed(1)},${y(m.loss).toFixed(1)}`).join(" ");
    out.push(`<polyline points="${points}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>`);
  }
  const withAccuracy = metrics.filter((m) => m.accuracy !== undefined);
  if (withAccuracy.length > 0) {
    const ya = (a: number) => top + plotH - a * plotH;
    for (const t of [0, 0.25, 0.5, 0.75, 1]) out.push(`<text x="${left + plotW + 6}" y="${(ya(t) + 4).toFixed(1)}" fill="#d62728">${t * 100}%</text>`);
    // per-step accuracy over a few dozen labels is noisy: plot a trailing moving average
    const window = Math.max(1, Math.floor(withAccuracy.length / 25));
    out.push(`<text transform="translate(${width - 12} ${top + plotH / 2}) rotate(90)" text-anchor="middle" fill="#d62728">accuracy (mean of ${window} steps)</text>`);
    let sum = 0;
    const points = withAccuracy
      .map((m, i) => {
        sum += m.accuracy! - (i >= window ? withAccuracy[i - window]!.accuracy! : 0);
        return `${x(m.step).toFixed(1)},${ya(sum / Math.min(i + 1, window)).toFixed(1)}`;
      })
      .join(" ");
    out.push(`<polyline points="${points}" fill="none" stroke="#d62728" stroke-width="1" opacity="0.7"/>`);
  }
  out.push("</svg>");
  return `${out.join("\n")}\n`;
}
