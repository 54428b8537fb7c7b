/**
 * Helpers for tests of kernels (exported for other packages' tests too): a
 * seeded random number generator, random tensors, the error norm used to
 * compare implementations, and central finite differences in float64.
 */
import { Tensor } from "@ulysses/tensors";
import type { F64, Real } from "./float64.js";

/** A small seeded generator (mulberry32): uniform in [0, 1). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A float32 tensor with entries uniform in [-scale, scale). */
export function randomTensor(shape: readonly number[], random: () => number, scale = 1): Tensor<"float32"> {
  const t = new Tensor("float32", shape);
  for (let i = 0; i < t.size; i++) t.data[i] = (2 * random() - 1) * scale;
  return t;
}

/** A float64 tensor with entries uniform in [-scale, scale). */
export function randomTensor64(shape: readonly number[], random: () => number, scale = 1): F64 {
  const t = new Tensor("float64", shape);
  for (let i = 0; i < t.size; i++) t.data[i] = (2 * random() - 1) * scale;
  return t;
}

/**
 * The error norm of the kernels' tests: max |actual - expected| divided by
 * max |expected| (relative to the expected tensor's largest magnitude, so
 * near-zero entries do not blow it up). Infinity when shapes differ.
 */
export function maxRelativeError(actual: Real, expected: Real): number {
  if (actual.shape.length !== expected.shape.length || actual.shape.some((d, i) => d !== expected.shape[i])) return Infinity;
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < expected.size; i++) {
    const e = expected.data[i]!;
    const a = actual.data[i]!;
    if (Number.isNaN(a) || Number.isNaN(e)) return Infinity;
    diff = Math.max(diff, Math.abs(a - e));
    scale = Math.max(scale, Math.abs(e));
  }
  return scale === 0 ? diff : diff / scale;
}

/**
 * d loss / d x by central differences in float64: x is perturbed in place by
 * +-step, element by element, and restored.
 */
export function numericalGradient(loss: () => number, x: F64, step = 1e-6): F64 {
  const grad = new Tensor("float64", x.shape);
  for (let i = 0; i < x.size; i++) {
    const saved = x.data[i]!;
    x.data[i] = saved + step;
    const plus = loss();
    x.data[i] = saved - step;
    const minus = loss();
    x.data[i] = saved;
    grad.data[i] = (plus - minus) / (2 * step);
  }
  return grad;
}

/** sum(a * b): the scalar whose gradient w.r.t. a is b. */
export function dot(a: Real, b: Real): number {
  let s = 0;
  for (let i = 0; i < a.size; i++) s += a.data[i]! * b.data[i]!;
  return s;
}
