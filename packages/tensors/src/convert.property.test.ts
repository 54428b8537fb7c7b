// Property-based and exhaustive tests of the 16-bit conversions against an
// independent reference: every finite fp16/bf16 value computed from its
// fields with Math.pow, and rounding by binary search for the nearest
// neighbour in that sorted table (ties to the even pattern).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Tensor, bfloat16BitsToFloat32, float16BitsToFloat32, float32ToBfloat16Bits, float32ToFloat16Bits, toDType } from "@ulysses/tensors";

interface Format {
  mantissaBits: number;
  exponentBits: number;
  /** Value of each non-negative pattern 0..Inf, in increasing order; the Inf slot holds 2^(emax+1). */
  values: number[];
}

function makeFormat(mantissaBits: number, exponentBits: number): Format {
  const bias = 2 ** (exponentBits - 1) - 1;
  const infPattern = (2 ** exponentBits - 1) * 2 ** mantissaBits;
  const values: number[] = [];
  for (let p = 0; p <= infPattern; p++) {
    const exponent = Math.floor(p / 2 ** mantissaBits);
    const mantissa = p % 2 ** mantissaBits;
    values.push(exponent === 0 ? mantissa * 2 ** (1 - bias - mantissaBits) : (1 + mantissa / 2 ** mantissaBits) * 2 ** (exponent - bias));
  }
  return { mantissaBits, exponentBits, values };
}

const HALF = makeFormat(10, 5);
const BF16 = makeFormat(7, 8);

/** The reference: nearest table entry to x, ties to the even pattern; beyond the table is Inf. */
function referenceBits(format: Format, x: number): number {
  const signBit = 2 ** (format.mantissaBits + format.exponentBits);
  const sign = x < 0 || Object.is(x, -0) ? signBit : 0;
  const a = Math.abs(x);
  const values = format.values;
  const inf = values.length - 1;
  if (a >= values[inf]!) return sign + inf;
  let lo = 0;
  let hi = inf; // values[lo] <= a < values[hi]
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (values[mid]! <= a) lo = mid;
    else hi = mid;
  }
  const below = a - values[lo]!;
  const above = values[hi]! - a;
  const pick = below < above ? lo : above < below ? hi : lo % 2 === 0 ? lo : hi;
  return sign + pick;
}

const isNaNBits = (format: Format, h: number) => {
  const exponentMask = (2 ** format.exponentBits - 1) * 2 ** format.mantissaBits;
  return (h & exponentMask) === exponentMask && h % 2 ** format.mantissaBits !== 0;
};

interface Codec {
  name: string;
  format: Format;
  encode: (x: number) => number;
  decode: (bits: number) => number;
}

const CODECS: Codec[] = [
  { name: "fp16", format: HALF, encode: float32ToFloat16Bits, decode: float16BitsToFloat32 },
  { name: "bf16", format: BF16, encode: float32ToBfloat16Bits, decode: bfloat16BitsToFloat32 },
];

const asFloat32 = (bits: number) => new Float32Array(new Uint32Array([bits]).buffer)[0]!;
const bitsOfFloat32 = (x: number) => new Uint32Array(new Float32Array([x]).buffer)[0]!;

describe.each(CODECS)("$name against the reference", ({ format, encode, decode }) => {
  const infPattern = format.values.length - 1;

  it("every one of the 65536 patterns decodes to its reference value and encodes back to itself", () => {
    for (let h = 0; h < 65536; h++) {
      const value = decode(h);
      if (isNaNBits(format, h)) {
        expect(value).toBeNaN();
        continue;
      }
      const magnitude = (h & 0x7fff) === infPattern ? Infinity : format.values[h & 0x7fff]!;
      const expected = h & 0x8000 ? -magnitude : magnitude;
      if (value !== expected || encode(value) !== h) expect([h, value, encode(value)]).toEqual([h, expected, h]);
    }
  });

  it("rounds random float32 and float64 values to the nearest pattern (ties to even)", () => {
    const arb = fc.oneof(fc.float({ noNaN: true }), fc.double({ noNaN: true }), fc.double({ min: -1e5, max: 1e5, noNaN: true }));
    fc.assert(
      fc.property(arb, (x) => {
        expect(encode(x)).toBe(referenceBits(format, x));
      }),
      { numRuns: 4000 },
    );
  });

  it("rounds values at and next to every kind of tie exactly (midpoints and their float32 neighbours)", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: infPattern - 1 }), fc.integer({ min: -2, max: 2 }), fc.boolean(), (p, nudge, negative) => {
        const mid = (format.values[p]! + format.values[p + 1]!) / 2; // exact in float32
        const x = asFloat32(bitsOfFloat32(mid) + nudge) * (negative ? -1 : 1);
        expect(encode(x)).toBe(referenceBits(format, x));
      }),
      { numRuns: 3000 },
    );
  });

  it("float32 -> 16 bits -> float32 -> 16 bits is a fixed point; NaN stays NaN", () => {
    fc.assert(
      fc.property(fc.float(), (x) => {
        const h = encode(x);
        const again = encode(decode(h));
        if (Number.isNaN(x)) expect(isNaNBits(format, h) && isNaNBits(format, again)).toBe(true);
        else expect(again).toBe(h);
      }),
      { numRuns: 2000 },
    );
  });
});

describe("toDType agrees with the scalar reference element by element", () => {
  const arbFloats = fc.array(fc.float({ noNaN: true }), { minLength: 1, maxLength: 64 });

  it("float32 -> float16 / bfloat16, and float16 <-> bfloat16", () => {
    fc.assert(
      fc.property(arbFloats, (xs) => {
        const t = Tensor.from("float32", [xs.length], xs);
        const h = toDType(t, "float16");
        const b = toDType(t, "bfloat16");
        expect(Array.from(h.data)).toEqual(xs.map((x) => referenceBits(HALF, x)));
        expect(Array.from(b.data)).toEqual(xs.map((x) => referenceBits(BF16, x)));
        const hValues = Array.from(h.data, (v) => float16BitsToFloat32(v));
        const bValues = Array.from(b.data, (v) => bfloat16BitsToFloat32(v));
        expect(Array.from(toDType(h, "bfloat16").data)).toEqual(hValues.map((v) => referenceBits(BF16, v)));
        expect(Array.from(toDType(b, "float16").data)).toEqual(bValues.map((v) => referenceBits(HALF, v)));
        expect(Array.from(toDType(h, "float32").data)).toEqual(hValues);
        expect(Array.from(toDType(b, "float64").data)).toEqual(bValues);
      }),
      { numRuns: 300 },
    );
  });

  it("float64 -> float16 / bfloat16", () => {
    fc.assert(
      fc.property(fc.array(fc.double({ noNaN: true }), { minLength: 1, maxLength: 32 }), (xs) => {
        const t = Tensor.from("float64", [xs.length], xs);
        expect(Array.from(toDType(t, "float16").data)).toEqual(xs.map((x) => referenceBits(HALF, x)));
        expect(Array.from(toDType(t, "bfloat16").data)).toEqual(xs.map((x) => referenceBits(BF16, x)));
      }),
      { numRuns: 300 },
    );
  });
});
