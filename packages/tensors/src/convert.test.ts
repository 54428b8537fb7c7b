// Expected bit patterns below are derived by hand from the IEEE 754 formats
// (fp16: 1 sign, 5 exponent bits with bias 15, 10 mantissa bits; bf16: the
// top 16 bits of a float32), never by running the code under test.
import { describe, expect, it } from "vitest";
import {
  Tensor,
  bfloat16BitsToFloat32,
  float16BitsToFloat32,
  float32BitsToBfloat16Bits,
  float32BitsToFloat16Bits,
  float32ToBfloat16Bits,
  float32ToFloat16Bits,
  toDType,
  toDTypeInto,
} from "@ulysses/tensors";

/** The number whose float32 bit pattern is `bits`. */
function fromF32Bits(bits: number): number {
  return new Float32Array(new Uint32Array([bits]).buffer)[0]!;
}

const isHalfNaN = (h: number) => (h & 0x7c00) === 0x7c00 && (h & 0x03ff) !== 0;
const isBf16NaN = (h: number) => (h & 0x7f80) === 0x7f80 && (h & 0x007f) !== 0;

describe("float32 -> float16 bits", () => {
  const cases: [number, number][] = [
    [1, 0x3c00],
    [-2, 0xc000],
    [0.5, 0x3800],
    [0.1, 0x2e66], // 1.6 * 2^-4: exponent 11, mantissa round(0.6 * 1024) = 614
    [1 / 3, 0x3555], // 1.333 * 2^-2: exponent 13, mantissa round(341.33) = 341
    [65504, 0x7bff], // largest finite
    [65519, 0x7bff], // just below the overflow threshold
    [65520, 0x7c00], // tie between 65504 (odd mantissa) and 2^16: even goes up, to Inf
    [1e6, 0x7c00],
    [-1e6, 0xfc00],
    [2 ** -14, 0x0400], // smallest normal
    [2 ** -14 - 2 ** -24, 0x03ff], // largest subnormal
    [2 ** -24, 0x0001], // smallest subnormal
    [2 ** -25, 0x0000], // tie between 0 and 2^-24: even is 0
    [3 * 2 ** -26, 0x0001], // above that tie
    [3 * 2 ** -25, 0x0002], // tie between 1 and 2 units: even is 2
    [5 * 2 ** -25, 0x0002], // tie between 2 and 3 units: even is 2
    [2 ** -26, 0x0000],
    [1 + 2 ** -11, 0x3c00], // tie between 0x3c00 and 0x3c01: even
    [1 + 3 * 2 ** -11, 0x3c02], // tie between 0x3c01 and 0x3c02: even
    [1 + 2 ** -11 + 2 ** -23, 0x3c01], // just above the tie
    [1 + 2 ** -11 - 2 ** -24, 0x3c00], // just below the tie
    [2047.5, 0x6800], // 2^11 - 0.5: last-place 1 at 2^10..2^11, tie from 0x67ff (odd) up to 2048
    [0, 0x0000],
    [-0, 0x8000],
    [Infinity, 0x7c00],
    [-Infinity, 0xfc00],
  ];
  it("known values, ties, overflow, subnormals, signed zeros, infinities", () => {
    expect(cases.map(([value]) => [value, float32ToFloat16Bits(value)])).toEqual(cases);
  });

  it("keeps NaN a NaN, with its sign", () => {
    expect(isHalfNaN(float32ToFloat16Bits(NaN))).toBe(true);
    expect(isHalfNaN(float32BitsToFloat16Bits(0x7f800001))).toBe(true); // payload only in low bits
    const negative = float32BitsToFloat16Bits(0xffc00000);
    expect(isHalfNaN(negative) && (negative & 0x8000) !== 0).toBe(true);
  });

  it("rounds a float64 once, not through float32", () => {
    // 1 + 2^-11 + 2^-40 is above the fp16 tie; float32 would first round it onto the tie.
    expect(float32ToFloat16Bits(1 + 2 ** -11 + 2 ** -40)).toBe(0x3c01);
    expect(float32ToFloat16Bits(-(1 + 2 ** -11 + 2 ** -40))).toBe(0xbc01);
    // 65520 - 2^-30 is below the overflow threshold; float32 would round it to 65520 (-> Inf).
    expect(float32ToFloat16Bits(65520 - 2 ** -30)).toBe(0x7bff);
    expect(float32ToFloat16Bits(2 ** -25 + 2 ** -60)).toBe(0x0001);
    expect(float32ToFloat16Bits(1e300)).toBe(0x7c00);
    expect(float32ToFloat16Bits(-1e-300)).toBe(0x8000);
    expect(float32ToFloat16Bits(5e-324)).toBe(0x0000);
  });
});

describe("float16 bits -> number", () => {
  const cases: [number, number][] = [
    [0x3c00, 1],
    [0xc000, -2],
    [0x7bff, 65504],
    [0x0400, 2 ** -14],
    [0x03ff, 1023 * 2 ** -24],
    [0x0001, 2 ** -24],
    [0x0200, 2 ** -15],
    [0x3555, 1365 / 4096],
    [0x3c01, 1 + 2 ** -10],
    [0x7c00, Infinity],
    [0xfc00, -Infinity],
  ];
  it("known patterns", () => {
    expect(cases.map(([bits]) => [bits, float16BitsToFloat32(bits)])).toEqual(cases);
  });

  it("signed zeros and NaN", () => {
    expect(Object.is(float16BitsToFloat32(0x8000), -0)).toBe(true);
    expect(Object.is(float16BitsToFloat32(0x0000), 0)).toBe(true);
    expect(float16BitsToFloat32(0x7e00)).toBeNaN();
    expect(float16BitsToFloat32(0xfc01)).toBeNaN();
  });
});

describe("float32 -> bfloat16 bits", () => {
  const cases: [number, number][] = [
    [0x3f800000, 0x3f80], // 1.0
    [0x3f808000, 0x3f80], // tie between 0x3f80 and 0x3f81: even
    [0x3f818000, 0x3f82], // tie between 0x3f81 and 0x3f82: even
    [0x3f808001, 0x3f81], // just above a tie
    [0x3f807fff, 0x3f80], // just below a tie
    [0xbf818000, 0xbf82], // negative tie
    [0x7f7fffff, 0x7f80], // largest float32 rounds up to Inf
    [0x7f7f7fff, 0x7f7f], // stays the largest bf16
    [0x7f7f8000, 0x7f80], // tie from 0x7f7f (odd) goes up: Inf
    [0x7f800000, 0x7f80], // +Inf
    [0xff800000, 0xff80], // -Inf
    [0x00008000, 0x0000], // subnormal tie to even 0
    [0x00018000, 0x0002], // subnormal tie to even 2
    [0x00010000, 0x0001],
    [0x80000000, 0x8000], // -0
  ];
  it("known patterns: ties to even, overflow, subnormals, infinities (from bits and from numbers)", () => {
    expect(cases.map(([f32bits]) => [f32bits, float32BitsToBfloat16Bits(f32bits)])).toEqual(cases);
    expect(cases.map(([f32bits]) => [f32bits, float32ToBfloat16Bits(fromF32Bits(f32bits))])).toEqual(cases);
  });

  it("keeps NaN a NaN (truncating 0x7f800001 would give Inf)", () => {
    expect(isBf16NaN(float32BitsToBfloat16Bits(0x7f800001))).toBe(true);
    expect(isBf16NaN(float32BitsToBfloat16Bits(0xff800001))).toBe(true);
    expect(float32BitsToBfloat16Bits(0xff800001) & 0x8000).toBe(0x8000);
    expect(isBf16NaN(float32ToBfloat16Bits(NaN))).toBe(true);
  });

  it("rounds a float64 once, not through float32", () => {
    // 1 + 2^-8 + 2^-30 is above the bf16 tie; float32 would first round it onto the tie.
    expect(float32ToBfloat16Bits(1 + 2 ** -8 + 2 ** -30)).toBe(0x3f81);
    expect(float32ToBfloat16Bits(-(1 + 2 ** -8 + 2 ** -30))).toBe(0xbf81);
    expect(float32ToBfloat16Bits(1 + 2 ** -8 - 2 ** -30)).toBe(0x3f80);
    expect(float32ToBfloat16Bits(1e300)).toBe(0x7f80);
    expect(float32ToBfloat16Bits(2 ** -133)).toBe(0x0001); // smallest bf16 subnormal
    expect(float32ToBfloat16Bits(2 ** -134 + 2 ** -160)).toBe(0x0001);
    expect(float32ToBfloat16Bits(2 ** -134)).toBe(0x0000);
  });

  it("bits -> number", () => {
    expect(bfloat16BitsToFloat32(0x3f80)).toBe(1);
    expect(bfloat16BitsToFloat32(0xc049)).toBe(-3.140625); // -2 * (1 + 73/128)
    expect(bfloat16BitsToFloat32(0x7f7f)).toBe((2 - 2 ** -7) * 2 ** 127);
    expect(bfloat16BitsToFloat32(0x0001)).toBe(2 ** -133);
    expect(bfloat16BitsToFloat32(0x7f80)).toBe(Infinity);
    expect(bfloat16BitsToFloat32(0xff80)).toBe(-Infinity);
    expect(bfloat16BitsToFloat32(0x7fc0)).toBeNaN();
    expect(Object.is(bfloat16BitsToFloat32(0x8000), -0)).toBe(true);
  });
});

describe("toDType", () => {
  it("float32 -> float16 -> float32 on known values", () => {
    const t = Tensor.from("float32", [2, 3], [1, 65520, 2 ** -25, 0.1, -Infinity, NaN]);
    const h = toDType(t, "float16");
    expect(h.dtype).toBe("float16");
    expect(h.shape).toEqual([2, 3]);
    expect(Array.from(h.data).slice(0, 5)).toEqual([0x3c00, 0x7c00, 0x0000, 0x2e66, 0xfc00]);
    expect(isHalfNaN(h.data[5]!)).toBe(true);
    const back = toDType(h, "float32");
    expect(Array.from(back.data).slice(0, 5)).toEqual([1, Infinity, 0, Math.fround(1638 / 16384), -Infinity]);
    expect(back.data[5]).toBeNaN();
  });

  it("float32 -> bfloat16 keeps signalling-NaN bit patterns NaN", () => {
    const t = new Tensor("float32", [3]);
    new Uint32Array(t.data.buffer).set([0x7f800001, 0x3f818000, 0x7f7fffff]);
    const b = toDType(t, "bfloat16");
    expect(isBf16NaN(b.data[0]!)).toBe(true);
    expect(Array.from(b.data).slice(1)).toEqual([0x3f82, 0x7f80]);
  });

  it("float16 <-> bfloat16 round once", () => {
    const h = new Tensor("float16", [4], new Uint16Array([0x3c01, 0x7bff, 0x0001, 0xfc00]));
    // 1+2^-10 -> 1; 65504 -> 2^16 (0x4780); 2^-24 -> exponent 103 (0x3380); -Inf.
    expect(Array.from(toDType(h, "bfloat16").data)).toEqual([0x3f80, 0x4780, 0x3380, 0xff80]);
    const b = new Tensor("bfloat16", [4], new Uint16Array([0x4780, 0x3f81, 0x3380, 0x8000]));
    // 65536 -> Inf; 1+2^-7 -> 0x3c08; 2^-24 -> 0x0001; -0.
    expect(Array.from(toDType(b, "float16").data)).toEqual([0x7c00, 0x3c08, 0x0001, 0x8000]);
  });

  it("float64 -> float16/bfloat16 round once", () => {
    const t = Tensor.from("float64", [3], [1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -8 + 2 ** -30, 65520]);
    // fp16: above the tie -> 0x3c01; 1 + 4 * 2^-10 + tiny -> 0x3c04; the overflow threshold -> Inf.
    expect(Array.from(toDType(t, "float16").data)).toEqual([0x3c01, 0x3c04, 0x7c00]);
    expect(Array.from(toDType(t, "bfloat16").data)).toEqual([0x3f80, 0x3f81, 0x4780]);
  });

  it("int32 <-> float32 (ties to even on the way in, truncation on the way out)", () => {
    const i = Tensor.from("int32", [4], [16777217, 16777219, -16777217, 7]);
    expect(Array.from(toDType(i, "float32").data)).toEqual([16777216, 16777220, -16777216, 7]);
    expect(Array.from(toDType(i, "float64").data)).toEqual([16777217, 16777219, -16777217, 7]);
    const f = Tensor.from("float32", [5], [2.75, -2.75, -0.5, 2147483520, -2147483648]);
    expect(Array.from(toDType(f, "int32").data)).toEqual([2, -2, 0, 2147483520, -2147483648]);
  });

  it("int32 -> float16/bfloat16 and back", () => {
    const i = Tensor.from("int32", [4], [2049, 2051, 65520, -300]);
    // fp16 spacing is 2 in [2048, 4096): 2049 and 2051 are ties -> 2048 (0x6800) and 2052 (0x6802).
    // -300 = -1.171875 * 2^8: exponent 23, mantissa 176 -> 0xdcb0.
    const h = toDType(i, "float16");
    expect(Array.from(h.data)).toEqual([0x6800, 0x6802, 0x7c00, 0xdcb0]);
    const finite = new Tensor("float16", [3], new Uint16Array([0x6800, 0x6802, 0xdcb0]));
    expect(Array.from(toDType(finite, "int32").data)).toEqual([2048, 2052, -300]);
    // bf16: -300 -> sign 1, exponent 135, mantissa 22 -> 0xc396; 2049 -> 2048 = 0x4500.
    expect(Array.from(toDType(Tensor.from("int32", [2], [-300, 2049]), "bfloat16").data)).toEqual([0xc396, 0x4500]);
  });

  it("float16 -> float64 and bfloat16 -> float64 are exact", () => {
    const h = new Tensor("float16", [2], new Uint16Array([0x0001, 0x3555]));
    expect(Array.from(toDType(h, "float64").data)).toEqual([2 ** -24, 1365 / 4096]);
    const b = new Tensor("bfloat16", [2], new Uint16Array([0x0001, 0xc049]));
    expect(Array.from(toDType(b, "float64").data)).toEqual([2 ** -133, -3.140625]);
  });

  it("same dtype makes a copy; toDTypeInto reuses its output", () => {
    const t = Tensor.from("float32", [2], [1, 2]);
    const c = toDType(t, "float32");
    expect(c.data).not.toBe(t.data);
    expect(Array.from(c.data)).toEqual([1, 2]);
    const out = new Tensor("float16", [2]);
    expect(toDTypeInto(t, out)).toBe(out);
    expect(Array.from(out.data)).toEqual([0x3c00, 0x4000]);
  });

  it("converts subarrays of one buffer that do not overlap", () => {
    const buffer = new ArrayBuffer(16);
    const src = new Tensor("float32", [2], new Float32Array(buffer, 0, 2));
    src.data.set([1, -2]);
    const out = new Tensor("float16", [2], new Uint16Array(buffer, 8, 2));
    toDTypeInto(src, out);
    expect(Array.from(out.data)).toEqual([0x3c00, 0xc000]);
  });
});
