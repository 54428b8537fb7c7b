/**
 * Round axis ticks: a step of 1, 2, 2.5 or 5 times a power of ten, chosen so
 * that about `count` steps cover the range, and the ticks at its multiples.
 */

/** The round step for about `count` steps over [low, high] (the first of 1, 2, 2.5, 5, 10 × 10^k not below the raw step). */
export function niceStep(low: number, high: number, count = 5): number {
  const raw = (high - low) / Math.max(1, count);
  if (!(raw > 0) || !Number.isFinite(raw)) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 2.5, 5, 10].map((f) => f * magnitude).find((s) => s >= raw * (1 - 1e-12)) ?? raw;
}

/** The multiples of niceStep(low, high, count) inside [low, high] (just `[low]` when the range is empty). */
export function niceTicks(low: number, high: number, count = 5): number[] {
  if (!(high > low)) return [low];
  const step = niceStep(low, high, count);
  const ticks: number[] = [];
  for (let t = Math.ceil(low / step - 1e-9) * step; t <= high + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

/** [low, high] widened to multiples of its round step, and the ticks from one end to the other. */
export function niceRange(low: number, high: number, count = 5): { min: number; max: number; ticks: number[] } {
  const top = high > low ? high : low + 1;
  const step = niceStep(low, top, count);
  const min = Number((Math.floor(low / step + 1e-9) * step).toPrecision(12));
  const max = Number((Math.ceil(top / step - 1e-9) * step).toPrecision(12));
  const ticks: number[] = [];
  for (let i = 0; min + i * step <= max + step * 1e-9; i++) ticks.push(Number((min + i * step).toPrecision(12)));
  return { min, max, ticks };
}
