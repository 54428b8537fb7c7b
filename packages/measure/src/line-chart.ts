/**
 * A dependency-free SVG line chart: named series of (x, y) points on a linear
 * or log2 x axis, a linear y axis on the left and optionally a second one on
 * the right (e.g. an accuracy in [0, 1] next to a loss), round ticks with
 * grid lines, axis labels, a title and a legend. A point without a value
 * (y = null or not finite, e.g. out of memory) breaks its line and is marked
 * with a cross on the x axis. Text is XML-escaped.
 */
import { MeasureError } from "./errors.js";
import { niceRange, niceTicks } from "./nice-ticks.js";

export interface ChartPoint {
  x: number;
  y: number | null;
}

export interface Series {
  name: string;
  points: readonly ChartPoint[];
  /** Stroke dash pattern, e.g. "6 3". */
  dash?: string;
  /** Stroke colour (default: the palette, in series order). */
  color?: string;
  /** The y axis the series is drawn against (default "left"; "right" needs `ChartOptions.right`). */
  axis?: "left" | "right";
  /** A dot at every point (default `ChartOptions.markers`). */
  markers?: boolean;
}

/** A second y axis on the right, over a fixed range. */
export interface RightAxis {
  label: string;
  min: number;
  max: number;
  /** Tick values (default: round ticks over [min, max]). */
  ticks?: readonly number[];
  format?: (y: number) => string;
}

export interface ChartOptions {
  title: string;
  xLabel: string;
  yLabel: string;
  /** A log2 x axis (every x must be positive). */
  logX?: boolean;
  /** x ticks at the distinct x values of the data ("data", the default on a log axis) or at round values ("round"). */
  xTicks?: "data" | "round";
  formatX?: (x: number) => string;
  formatY?: (y: number) => string;
  right?: RightAxis;
  /** A legend right of the plot (default true). */
  legend?: boolean;
  /** Dots at the points (default true; a series can override it). */
  markers?: boolean;
  width?: number;
  height?: number;
}

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

function escapeXml(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

const hasValue = (p: ChartPoint): p is { x: number; y: number } => p.y !== null && Number.isFinite(p.y);
const fixed = (v: number) => v.toFixed(1);

/** The x ticks: the data's own x values, or round values (powers of two on a log axis). */
function xTickValues(xs: readonly number[], logX: boolean, mode: "data" | "round"): number[] {
  if (xs.length === 0) return [0, 1];
  if (mode === "data") return [...new Set(xs)].sort((a, b) => a - b);
  const low = Math.min(...xs);
  const high = Math.max(...xs);
  if (!logX) return niceTicks(low, high);
  const ticks: number[] = [];
  for (let e = Math.ceil(Math.log2(low) - 1e-9); 2 ** e <= high * (1 + 1e-9); e++) ticks.push(2 ** e);
  return ticks;
}

/** The chart as an SVG document (ends with a newline). */
export function lineChart(series: readonly Series[], options: ChartOptions): string {
  const width = options.width ?? 720;
  const height = options.height ?? 420;
  const logX = options.logX === true;
  const legend = options.legend ?? true;
  const right = options.right;
  for (const s of series) {
    if (s.axis === "right" && right === undefined) throw new MeasureError(`lineChart: series '${s.name}' is on the right axis but options.right is not set`);
    for (const p of s.points) {
      if (!Number.isFinite(p.x) || (logX && p.x <= 0))
        throw new MeasureError(`lineChart: series '${s.name}' has x = ${p.x}, not ${logX ? "a positive number (log x axis)" : "a finite number"}`);
    }
  }
  if (right !== undefined && !(right.max > right.min))
    throw new MeasureError(`lineChart: right axis '${right.label}' needs max > min, got ${right.min}..${right.max}`);
  const margin = { left: 70, right: 20 + (right === undefined ? 0 : 50) + (legend ? 160 : 0), top: 40, bottom: 55 };
  const plotW = width - margin.left - margin.right;
  const plotH = height - margin.top - margin.bottom;
  if (!(plotW > 0) || !(plotH > 0))
    throw new MeasureError(
      `lineChart: ${width} x ${height} leaves no room for the plot (margins ${margin.left + margin.right} x ${margin.top + margin.bottom})`,
    );

  const xs = series.flatMap((s) => s.points.map((p) => p.x));
  const tx = (x: number) => (logX ? Math.log2(x) : x);
  const xTicks = xTickValues(xs, logX, options.xTicks ?? (logX ? "data" : "round"));
  const xLow = xs.length > 0 ? Math.min(...xs.map(tx)) : 0;
  const xHigh = xs.length > 0 ? Math.max(...xs.map(tx)) : 1;
  const xSpan = xHigh > xLow ? xHigh - xLow : 1;
  const px = (x: number) => margin.left + ((tx(x) - xLow) / xSpan) * plotW;

  const leftValues = series.filter((s) => s.axis !== "right").flatMap((s) => s.points.filter(hasValue).map((p) => p.y));
  const leftRange = niceRange(Math.min(0, ...leftValues), leftValues.length > 0 ? Math.max(...leftValues) : 1);
  const scale = (min: number, max: number) => (y: number) => margin.top + plotH - ((y - min) / (max - min)) * plotH;
  const pyLeft = scale(leftRange.min, leftRange.max);
  const pyRight = right === undefined ? pyLeft : scale(right.min, right.max);
  const formatX = options.formatX ?? ((x: number) => String(x));
  const formatY = options.formatY ?? ((y: number) => String(Number(y.toPrecision(6))));

  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="${margin.left}" y="22" font-size="15" font-weight="bold">${escapeXml(options.title)}</text>`,
  ];
  const plotRight = margin.left + plotW;
  const plotBottom = margin.top + plotH;
  for (const t of leftRange.ticks) {
    const y = fixed(pyLeft(t));
    out.push(`<line x1="${margin.left}" x2="${plotRight}" y1="${y}" y2="${y}" stroke="#ddd"/>`);
    out.push(`<text x="${margin.left - 6}" y="${y}" text-anchor="end" dominant-baseline="middle">${escapeXml(formatY(t))}</text>`);
  }
  for (const t of xTicks) {
    const x = fixed(px(t));
    out.push(`<line x1="${x}" x2="${x}" y1="${margin.top}" y2="${plotBottom}" stroke="#eee"/>`);
    out.push(`<text x="${x}" y="${plotBottom + 16}" text-anchor="middle">${escapeXml(formatX(t))}</text>`);
  }
  out.push(`<rect x="${margin.left}" y="${margin.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#333"/>`);
  out.push(`<text x="${margin.left + plotW / 2}" y="${height - 12}" text-anchor="middle">${escapeXml(options.xLabel)}</text>`);
  out.push(`<text transform="translate(16 ${margin.top + plotH / 2}) rotate(-90)" text-anchor="middle">${escapeXml(options.yLabel)}</text>`);
  if (right !== undefined) {
    const format = right.format ?? ((y: number) => String(Number(y.toPrecision(6))));
    for (const t of right.ticks ?? niceTicks(right.min, right.max)) {
      out.push(`<text x="${plotRight + 6}" y="${fixed(pyRight(t))}" dominant-baseline="middle">${escapeXml(format(t))}</text>`);
    }
    out.push(`<text transform="translate(${plotRight + 44} ${margin.top + plotH / 2}) rotate(90)" text-anchor="middle">${escapeXml(right.label)}</text>`);
  }

  series.forEach((s, i) => {
    const color = s.color ?? COLORS[i % COLORS.length]!;
    const dash = s.dash === undefined ? "" : ` stroke-dasharray="${escapeXml(s.dash)}"`;
    const py = s.axis === "right" ? pyRight : pyLeft;
    const markers = s.markers ?? options.markers ?? true;
    let path = "";
    let penDown = false;
    for (const p of s.points) {
      const x = px(p.x);
      if (!hasValue(p)) {
        penDown = false;
        out.push(
          `<path d="M${fixed(x - 4)} ${plotBottom - 4}L${fixed(x + 4)} ${plotBottom + 4}M${fixed(x - 4)} ${plotBottom + 4}L${fixed(x + 4)} ${plotBottom - 4}" stroke="${color}" stroke-width="2"/>`,
        );
        continue;
      }
      path += `${penDown ? "L" : "M"}${fixed(x)} ${fixed(py(p.y))}`;
      penDown = true;
      if (markers) out.push(`<circle cx="${fixed(x)}" cy="${fixed(py(p.y))}" r="2.5" fill="${color}"/>`);
    }
    if (path !== "") out.push(`<path d="${path}" fill="none" stroke="${color}" stroke-width="2"${dash}/>`);
    if (legend) {
      const lx = plotRight + (right === undefined ? 0 : 50) + 12;
      const ly = margin.top + 14 + i * 18;
      out.push(`<line x1="${lx}" x2="${lx + 22}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="2"${dash}/>`);
      out.push(`<text x="${lx + 28}" y="${ly}" dominant-baseline="middle">${escapeXml(s.name)}</text>`);
    }
  });
  out.push("</svg>");
  return `${out.join("\n")}\n`;
}
