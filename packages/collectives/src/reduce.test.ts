import { describe, expect, it } from "vitest";
import { halfBits, reduceInto } from "./reduce.js";

/** Every positive finite float16 value, by code (independent decoding). */
const F16 = Array.from({ length: 0x7c00 }, (_, code) => {
  const exp = code >> 10;
  const frac = code & 0x3ff;
  return exp === 0 ? frac / 2 ** 24 : (1024 + frac) * 2 ** (exp - 25);
});

/** Nearest float16 code by search, ties to the even code; overflow to infinity as IEEE does. */
function nearestF16(x: number): number {
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  if (a >= 65520) return sign | 0x7c00;
  let lo = 0;
  let hi = F16.length - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (F16[mid]! <= a) lo = mid;
    else hi = mid;
  }
  const dLo = a - F16[lo]!;
  const dHi = F16[hi]! - a;
  return sign | (dLo < dHi || (dLo === dHi && lo % 2 === 0) ? lo : hi);
}

function randomFloats(n: number, seed: number): number[] {
  let s = seed;
  const next = () => ((s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  return Array.from({ length: n }, () => Math.fround((next() - 0.5) * 2 ** Math.floor(next() * 40 - 26)));
}

describe("16-bit float conversion used by reductions", () => {
  it("float32 -> float16 rounds to nearest even like a brute-force search", () => {
    const xs = [...randomFloats(3000, 7), 0, -0, 65504, 65519.99, 65520, 2 ** -24, 2 ** -25, 3 * 2 ** -26, 1 + 2 ** -11, 1 + 3 * 2 ** -11];
    for (const x of xs) expect([x, halfBits.f32ToF16(x)]).toEqual([x, nearestF16(x)]);
    for (let code = 0; code < 0x7c00; code += 7) expect(halfBits.f16ToF32(code)).toBe(F16[code]);
  });

  it("float32 -> bfloat16 rounds to nearest even", () => {
    const f = new Float32Array(1);
    const u = new Uint32Array(f.buffer);
    for (const x of randomFloats(3000, 11)) {
      f[0] = x;
      const lo = u[0]! >>> 16;
      u[0] = lo << 16;
      const vLo = f[0]!;
      u[0] = (lo + 1) << 16;
      const vHi = f[0]!;
      const pick = Math.abs(x - vLo) < Math.abs(vHi - x) || (Math.abs(x - vLo) === Math.abs(vHi - x) && lo % 2 === 0) ? lo : lo + 1;
      expect(halfBits.f32ToBf16(x)).toBe(pick);
    }
  });

  it("reduces in rank order with float32 rounding per step", () => {
    const a = Float32Array.from([1e8, 1]);
    const b = Float32Array.from([1, 1]);
    const c = Float32Array.from([-1e8, 1]);
    const out = new Float32Array(2);
    reduceInto("float32", "sum", out, 0, [a, b, c].map((data) => ({ data, offset: 0 })), 2);
    // (1e8 + 1) rounds to 1e8 in float32, then - 1e8 = 0
    expect(Array.from(out)).toEqual([0, 3]);
  });
});
