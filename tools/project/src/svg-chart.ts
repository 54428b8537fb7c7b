/**
 * A dependency-free SVG line chart: named series of (x, y) points, linear or
 * log2 x axis, linear y axis, legend. Missing points (y = null, e.g. out of
 * memory) break the line and are marked with a cross on the x axis.
 */

export interface Series {
  name: string;
  points: { x: number; y: number | null }[];
  /** Stroke dash pattern, e.g. "6 3". */
  dash?: string;
}

export interface ChartOptions {
  title: string;
  xLabel: string;
  yLabel: string;
  logX?: boolean;
  width?: number;
  height?: number;
  /** Formats x tick labels. */
  formatX?: (x: number) => string;
}

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

function escapeXml(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

function niceStep(range: number, ticks: number): number {
  const raw = range / Math.max(1, ticks);
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const residual = raw / magnitude;
  return (residual > 5 ? 10 : residual > 2 ? 5 : residual > 1 ? 2 : 1) * magnitude;
}

export function lineChart(series: readonly Series[], options: ChartOptions): string {
  const width = options.width ?? 720;
  const height = options.height ?? 420;
  const margin = { left: 70, right: 180, top: 40, bottom: 55 };
  const plotW = width - margin.left - margin.right;
  const plotH = height - margin.top - margin.bottom;
  const xs = series.flatMap((s) => s.points.map((p) => p.x));
  const ys = series.flatMap((s) => s.points.flatMap((p) => (p.y === null || !Number.isFinite(p.y) ? [] : [p.y])));
  const tx = (x: number) => (options.logX ? Math.log2(x) : x);
  const xMin = Math.min(...xs.map(tx));
  const xMax = Math.max(...xs.map(tx));
  const yMaxRaw = ys.length > 0 ? Math.max(...ys) : 1;
  const yMinRaw = ys.length > 0 ? Math.min(0, ...ys) : 0;
  const yStep = niceStep(yMaxRaw - yMinRaw || 1, 5);
  const yMin = Math.floor(yMinRaw / yStep) * yStep;
  const yMax = Math.ceil(yMaxRaw / yStep) * yStep || yStep;
  const px = (x: number) => margin.left + ((tx(x) - xMin) / (xMax - xMin || 1)) * plotW;
  const py = (y: number) => margin.top + plotH - ((y - yMin) / (yMax - yMin || 1)) * plotH;
  const formatX = options.formatX ?? ((x: number) => String(x));
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="12">`);
  out.push(`<rect width="${width}" height="${height}" fill="white"/>`);
  out.push(`<text x="${margin.left}" y="22" font-size="15" font-weight="bold">${escapeXml(options.title)}</text>`);
  for (let y = yMin; y <= yMax + yStep / 2; y += yStep) {
    const yy = py(y).toFixed(1);
    out.push(`<line x1="${margin.left}" x2="${margin.left + plotW}" y1="${yy}" y2="${yy}" stroke="#ddd"/>`);
    out.push(`<text x="${margin.left - 6}" y="${yy}" text-anchor="end" dominant-baseline="middle">${Number(y.toPrecision(6))}</text>`);
  }
  const xTicks = [...new Set(xs)].sort((a, c) => a - c);
  for (const x of xTicks) {
    const xx = px(x).toFixed(1);
    out.push(`<line x1="${xx}" x2="${xx}" y1="${margin.top}" y2="${margin.top + plotH}" stroke="#eee"/>`);
    out.push(`<text x="${xx}" y="${margin.top + plotH + 16}" text-anchor="middle">${escapeXml(formatX(x))}</text>`);
  }
  out.push(`<rect x="${margin.left}" y="${margin.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#333"/>`);
  out.push(`<text x="${margin.left + plotW / 2}" y="${height - 12}" text-anchor="middle">${escapeXml(options.xLabel)}</text>`);
  out.push(`<text transform="translate(16 ${margin.top + plotH / 2}) rotate(-90)" text-anchor="middle">${escapeXml(options.yLabel)}</text>`);
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const dash = s.dash ? ` stroke-dasharray="${s.dash}"` : "";
    let path = "";
    let pen = false;
    for (const p of s.points) {
      if (p.y === null || !Number.isFinite(p.y)) {
        pen = false;
        const xx = px(p.x);
        const yy = margin.top + plotH;
        out.push(`<path d="M${xx - 4} ${yy - 4}L${xx + 4} ${yy + 4}M${xx - 4} ${yy + 4}L${xx + 4} ${yy - 4}" stroke="${color}" stroke-width="2"/>`);
        continue;
      }
      path += `${pen ? "L" : "M"}${px(p.x).toFixed(1)} ${py(p.y).toFixed(1)}`;
      pen = true;
      out.push(`<circle cx="${px(p.x).toFixed(1)}" cy="${py(p.y).toFixed(1)}" r="2.5" fill="${color}"/>`);
    }
    if (path) out.push(`<path d="${path}" fill="none" stroke="${color}" stroke-width="2"${dash}/>`);
    const ly = margin.top + 14 + i * 18;
    const lx = margin.left + plotW + 12;
    out.push(`<line x1="${lx}" x2="${lx + 22}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="2"${dash}/>`);
    out.push(`<text x="${lx + 28}" y="${ly}" dominant-baseline="middle">${escapeXml(s.name)}</text>`);
  });
  out.push("</svg>");
  return out.join("\n");
}
