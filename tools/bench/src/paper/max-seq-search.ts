/**
 * The search of the maximum-sequence section: the largest multiple of `step`
 * for which a monotone predicate holds (here: one training step fits under a
 * per-rank memory cap). Doubles from `step` until the predicate fails (or
 * `limit` is passed), then bisects between the last success and the first
 * failure. Pure: the caller's predicate does the measuring.
 */

export interface SearchResult {
  /** Largest multiple of step that passed; 0 when even `step` failed. */
  best: number;
  /** Smallest value that failed (Infinity when `limit` was reached first). */
  firstFailure: number;
  /** Every probe in order, with its outcome. */
  probes: { value: number; ok: boolean }[];
}

export async function searchMaximum(fits: (value: number) => Promise<boolean>, step: number, limit: number): Promise<SearchResult> {
  if (!Number.isInteger(step) || step < 1) throw new Error(`searchMaximum: step must be a positive integer, got ${step}`);
  if (!(limit >= step)) throw new Error(`searchMaximum: limit ${limit} is below the step ${step}`);
  const probes: SearchResult["probes"] = [];
  const probe = async (value: number) => {
    const ok = await fits(value);
    probes.push({ value, ok });
    return ok;
  };
  let best = 0;
  let failure = Infinity;
  for (let units = 1; units * step <= limit; units *= 2) {
    if (await probe(units * step)) best = units * step;
    else {
      failure = units * step;
      break;
    }
  }
  if (failure === Infinity) {
    // Every doubling passed: bisect up to the limit only if the limit itself fails.
    const top = Math.floor(limit / step) * step;
    if (top > best) {
      if (await probe(top)) return { best: top, firstFailure: Infinity, probes };
      failure = top;
    } else return { best, firstFailure: Infinity, probes };
  }
  while (failure - best > step) {
    const mid = best + Math.floor((failure - best) / step / 2) * step;
    if (await probe(mid)) best = mid;
    else failure = mid;
  }
  return { best, firstFailure: failure, probes };
}
