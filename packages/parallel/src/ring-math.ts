/**
 * Ring attention's arithmetic on partial results: adding gradient blocks
 * into their accumulators and merging a block's partial attention into the
 * running output by log-sum-exp (float64 while merging).
 */
import type { Tensor } from "@ulysses/tensors";

type F32 = Tensor<"float32">;

/** sum [b, S, ...] rows [start, start + L) += part [b, L, ...]; returns sum. */
export function addRows(sum: F32, part: F32, start: number): F32 {
  const [b, rows] = sum.shape as unknown as [number, number];
  const l = part.shape[1]!;
  const inner = sum.data.length / (b * rows);
  const a = sum.data;
  const x = part.data;
  for (let row = 0; row < b; row++) {
    const to = (row * rows + start) * inner;
    const from = row * l * inner;
    for (let i = 0; i < l * inner; i++) a[to + i]! += x[from + i]!;
  }
  return sum;
}

/** sum += part (same shapes); returns sum. */
export function addInto(sum: F32, part: F32): F32 {
  const a = sum.data;
  const x = part.data;
  for (let i = 0; i < a.length; i++) a[i]! += x[i]!;
  return sum;
}

/**
 * Merges one call's partial attention into the running one, in place:
 * out [b, s, H, D], lse [b, H, s] (float64 while merging) with part
 * [b, L, H, D], partLse [b, H, L] for queries [start, start + L).
 */
export function mergeInto(out: F32, lse: Float64Array, part: F32, partLse: F32, start: number): void {
  const [b, s, heads, d] = out.shape as unknown as [number, number, number, number];
  const l = part.shape[1]!;
  const o = out.data;
  const p = part.data;
  for (let row = 0; row < b; row++) {
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < l; i++) {
        const at = (row * heads + h) * s + start + i;
        const lj = partLse.data[(row * heads + h) * l + i]!;
        if (lj === -Infinity) continue;
        const l0 = lse[at]!;
        // out [row, start + i, h, :] and part [row, i, h, :]
        const base = ((row * s + start + i) * heads + h) * d;
        const from = ((row * l + i) * heads + h) * d;
        if (l0 === -Infinity) {
          o.set(p.subarray(from, from + d), base);
          lse[at] = lj;
          continue;
        }
        const m = Math.max(l0, lj);
        const merged = m + Math.log(Math.exp(l0 - m) + Math.exp(lj - m));
        const a = Math.exp(l0 - merged);
        const c = Math.exp(lj - merged);
        for (let e = 0; e < d; e++) o[base + e] = a * o[base + e]! + c * p[from + e]!;
        lse[at] = merged;
      }
    }
  }
}
