/** Shared by the training equivalence tests: the kernels they run and how they compare vectors. */
import { ReferenceAttention, ReferenceOps, type TrainingOps, type LocalAttention } from "@ulysses/kernels";

/** Ops and a fresh local attention kernel per model. */
export interface Kernels {
  ops: TrainingOps;
  attention: () => LocalAttention;
}

/** The float64 reference kernels. */
export const reference: Kernels = { ops: new ReferenceOps(), attention: () => new ReferenceAttention() };

/** max |a - b| / max |b|: the largest element difference relative to the largest element of the reference b. */
export function maxRelative(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let scale = 0;
  let diff = 0;
  for (let i = 0; i < a.length; i++) {
    scale = Math.max(scale, Math.abs(b[i]!));
    diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
  }
  return diff / scale;
}

/** ||a - b|| / ||b|| (Euclidean; 0 when a equals b). */
export function normRelative(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let diff = 0;
  let norm = 0;
  for (let i = 0; i < a.length; i++) {
    diff += (a[i]! - b[i]!) ** 2;
    norm += b[i]! ** 2;
  }
  return diff === 0 ? 0 : Math.sqrt(diff / norm);
}
