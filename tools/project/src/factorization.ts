/**
 * Which split of a sequence-parallel group of P ranks into u Ulysses ranks
 * times r ring groups (P = u·r) the cost model predicts fastest, for a given
 * model, sequence and cluster. u follows the Ulysses head rule of the cost
 * model (u ≤ heads; uneven heads allowed, the busiest rank holds ⌈H/u⌉;
 * K/V heads replicated when u > Hkv); r is free. u = P is Ulysses, u = 1 ring.
 */
import { project, type GptShape, type Projection, type RunShape } from "./cost-model.js";
import { ProjectionError, type HardwareProfile } from "./profile.js";

export interface Factorization {
  ulyssesDegree: number;
  ringDegree: number;
  projection: Projection;
}

/** The run of one (u, r) split: "ulysses" when r = 1, "ring" when u = 1, "hybrid" otherwise. */
export function factorizationRun(base: Omit<RunShape, "scheme" | "ulyssesDegree" | "ringDegree">, ulyssesDegree: number): RunShape {
  const ringDegree = base.degree / ulyssesDegree;
  if (ringDegree === 1) return { ...base, scheme: "ulysses" };
  if (ulyssesDegree === 1) return { ...base, scheme: "ring" };
  return { ...base, scheme: "hybrid", ulyssesDegree, ringDegree };
}

/**
 * Every (u, r) with u·r = degree that the model allows (u divides the degree,
 * u ≤ heads, the sequence divides as the layout needs), projected, in
 * increasing u. Throws when none is allowed.
 */
export function factorizations(model: GptShape, base: Omit<RunShape, "scheme" | "ulyssesDegree" | "ringDegree">, hw: HardwareProfile): Factorization[] {
  const p = base.degree;
  const rows: Factorization[] = [];
  for (let u = 1; u <= p; u++) {
    if (p % u !== 0 || u > model.heads) continue;
    const r = p / u;
    if (base.seqLen % p !== 0) continue;
    if (r > 1 && base.causal && (base.layout ?? "zigzag") === "zigzag" && base.seqLen % (2 * p) !== 0) continue;
    rows.push({ ulyssesDegree: u, ringDegree: r, projection: project(model, factorizationRun(base, u), hw) });
  }
  if (rows.length === 0) {
    throw new ProjectionError(
      `factorizations: no (u, r) with u·r = ${p} fits ${model.name} (${model.heads} heads) at sequence ${base.seqLen} (${base.layout ?? "zigzag"})`,
    );
  }
  return rows;
}

/** The fastest split that fits in memory (the least-bad one when none fits), and all the splits it was chosen from. */
export function bestFactorization(
  model: GptShape,
  base: Omit<RunShape, "scheme" | "ulyssesDegree" | "ringDegree">,
  hw: HardwareProfile,
): { best: Factorization; all: Factorization[] } {
  const all = factorizations(model, base, hw);
  const fits = all.filter((f) => !f.projection.outOfMemory);
  const pool = fits.length > 0 ? fits : all;
  const best = pool.reduce((a, c) => (c.projection.stepSeconds < a.projection.stepSeconds ? c : a));
  return { best, all };
}
