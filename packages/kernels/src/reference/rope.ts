/**
 * Reference rotary embedding in float64 ("rotate half" layout): pair
 * (i, i + d/2) of token t is rotated by pos * inv_freq[i], inv_freq[i] =
 * base^(-2i/d) changed by the optional scaling (rope-scaling.ts), where pos
 * is offset + t, or the token's own position (packed documents restart them).
 * The backward is the same rotation with the opposite sign. yarn's attention
 * factor multiplies both (cos and sin scaled, as Hugging Face's tables are).
 */
import { ropeAttentionFactor, ropeInverseFrequencies, ropeInverseFrequency, type RopeScaling } from "../ops/rope-scaling.js";
import type { RopePositions } from "../ops/types.js";
import { ropeShape } from "../ops/validate.js";
import { zeros64, type F64, type Real } from "./float64.js";

/** The rotation angle of pair `i` at `position` for head dimension `headDim` (RoPE base `base`, optional scaling). */
export function ropeAngle(position: number, i: number, headDim: number, base: number, scaling?: RopeScaling): number {
  return position * ropeInverseFrequency(i, headDim, base, scaling);
}

/** The position of token t of row b: offset + t, or positions[b * seq + t]. */
export function ropePosition(positions: RopePositions, seq: number, b: number, t: number): number {
  return typeof positions === "number" ? positions + t : positions[b * seq + t]!;
}

/**
 * Rotates x [b, s, h, d] by sign * angle (sign 1: forward, -1: backward); positions: an offset or every token's (int32 [b * s]);
 * `scaling` changes the frequencies (none: plain RoPE).
 */
export function ropeRotate64(x: Real, positions: RopePositions, base: number, sign: 1 | -1, op = "rope", scaling?: RopeScaling): F64 {
  const [b, s, h, d] = ropeShape(op, x, positions, base, scaling);
  const half = d / 2;
  const frequencies = ropeInverseFrequencies(d, base, scaling);
  const m = ropeAttentionFactor(scaling);
  const y = zeros64(x.shape);
  for (let bi = 0; bi < b; bi++) {
    for (let t = 0; t < s; t++) {
      const position = ropePosition(positions, s, bi, t);
      for (let i = 0; i < half; i++) {
        const angle = sign * position * frequencies[i]!;
        const c = m * Math.cos(angle);
        const sn = m * Math.sin(angle);
        for (let hi = 0; hi < h; hi++) {
          const o = ((bi * s + t) * h + hi) * d;
          const x1 = x.data[o + i]!;
          const x2 = x.data[o + i + half]!;
          y.data[o + i] = x1 * c - x2 * sn;
          y.data[o + i + half] = x2 * c + x1 * sn;
        }
      }
    }
  }
  return y;
}
