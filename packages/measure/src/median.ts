/**
 * Medians and percentiles of timing samples. The result is always one of the
 * samples (a time that was measured, never the mean of two): the sample at
 * index ⌊p/100 · n⌋ of the sorted samples, capped at n − 1. For the median of
 * an even count that is the upper of the two middle samples, as every
 * benchmark of this repository has reported it.
 */
import { MeasureError } from "./errors.js";

function checked(values: readonly number[], what: string): void {
  if (values.length === 0) throw new MeasureError(`${what} of no samples: pass at least one value`);
  const bad = values.findIndex((v) => typeof v !== "number" || Number.isNaN(v));
  if (bad >= 0) throw new MeasureError(`${what}: sample ${bad} is ${String(values[bad])}, not a number`);
}

/** The sorted index of percentile `p` among `count` samples. */
function rankIndex(p: number, count: number): number {
  return Math.min(count - 1, Math.floor((p / 100) * count));
}

/** The `p`-th percentile (0 to 100) of `values`: the sample at sorted index ⌊p/100 · n⌋ (at most n − 1). */
export function percentile(values: readonly number[], p: number): number {
  if (!(p >= 0 && p <= 100)) throw new MeasureError(`percentile must be between 0 and 100, got ${p}`);
  checked(values, `percentile ${p}`);
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[rankIndex(p, sorted.length)]!;
}

/** The median sample of `values` (for an even count the upper middle one). */
export function median(values: readonly number[]): number {
  checked(values, "median");
  return percentile(values, 50);
}

/** The item whose `key` is the median of all items' keys (e.g. the timed step with the median step time). */
export function medianBy<T>(items: readonly T[], key: (item: T) => number): T {
  checked(items.map(key), "medianBy");
  const sorted = [...items].sort((a, b) => key(a) - key(b));
  return sorted[rankIndex(50, sorted.length)]!;
}

/**
 * Several ranks timed together: per repetition the slowest rank's time (they
 * start together after a barrier, so the repetition lasts that long), then
 * the median repetition. `perRank[r][i]` is rank r's time in repetition i;
 * repetitions that not every rank has are left out.
 */
export function medianOfSlowest(perRank: readonly (readonly number[])[]): number {
  const repeats = perRank.length === 0 ? 0 : Math.min(...perRank.map((times) => times.length));
  if (!(repeats >= 1))
    throw new MeasureError(`medianOfSlowest: every rank needs at least one repetition, got ${perRank.map((times) => times.length).join(", ") || "no ranks"}`);
  return median(Array.from({ length: repeats }, (_, i) => Math.max(...perRank.map((times) => times[i]!))));
}
