import { Rng } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { sliceGradients, type SliceGradients } from "./slice-gradients.js";

/**
 * bf16 rounding of a float32 value, written here from the definition and not
 * from bit tricks: the nearest multiple of the value's bf16 spacing
 * 2^(e - 7) (e its binary exponent), ties to the even multiple. Normal
 * numbers only (the test draws no subnormal sums).
 */
function bf16(x: number): number {
  if (x === 0) return 0;
  const e = Math.floor(Math.log2(Math.abs(x)));
  const spacing = 2 ** (e - 7);
  const q = x / spacing;
  const low = Math.floor(q);
  const rest = q - low;
  const multiple = rest > 0.5 || (rest === 0.5 && low % 2 !== 0) ? low + 1 : low;
  return multiple * spacing;
}

/** The stored elements as numbers (read at scale 1). */
function values(g: SliceGradients): number[] {
  const out = new Float32Array(g.length);
  g.read(0, out, 1);
  return [...out];
}

describe("slice gradients: ZeRO-2's summed slice in float32 or bfloat16", () => {
  const rng = new Rng(5, 1);
  const draw = (n: number, scale: number) => Float32Array.from({ length: n }, () => (rng.uniform() - 0.5) * scale);

  it("bfloat16: each added part summed in float32 with the stored value, then rounded to nearest even", () => {
    const g = sliceGradients(1000, "bfloat16");
    expect(g.bytes).toBe(2000);
    const first = draw(600, 2);
    const second = draw(700, 1e-2);
    const want = new Array<number>(1000).fill(0);
    g.addInto(100, Float32Array.from(first));
    for (let i = 0; i < 600; i++) want[100 + i] = bf16(Math.fround(first[i]!));
    g.addInto(300, Float32Array.from(second));
    for (let i = 0; i < 700; i++) want[300 + i] = bf16(Math.fround(want[300 + i]! + second[i]!));
    expect(values(g)).toEqual(want);
  });

  it("bfloat16: ties go to the even pattern, halfway values up and down", () => {
    const g = sliceGradients(4, "bfloat16");
    // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 (even: 1); 1 + 3 x 2^-8 between 1 + 2^-7 and 1 + 2^-6 (even: 1 + 2^-6)
    g.addInto(0, Float32Array.of(1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 1 + 2 ** -8 + 2 ** -20));
    expect(values(g)).toEqual([1, 1 + 2 ** -6, -1, 1 + 2 ** -7]);
  });

  it("sumOfSquares of the stored values and read with a clip scale, in both dtypes", () => {
    for (const dtype of ["float32", "bfloat16"] as const) {
      const g = sliceGradients(1003, dtype);
      g.addInto(0, draw(1003, 3));
      const stored = values(g);
      let sum = 0;
      for (const x of stored) sum += x * x;
      expect(Math.abs(g.sumOfSquares() - sum) / sum, dtype).toBeLessThan(1e-14);
      const out = new Float32Array(500);
      g.read(400, out, 0.3);
      expect([...out], dtype).toEqual(stored.slice(400, 900).map((x) => Math.fround(x * 0.3)));
      g.zero();
      expect(values(g).every((x) => x === 0)).toBe(true);
    }
  });

  it("float32: parts added exactly as float32 sums", () => {
    const g = sliceGradients(10, "float32");
    expect(g.bytes).toBe(40);
    const a = draw(10, 1);
    const b = draw(6, 1);
    g.addInto(0, Float32Array.from(a));
    g.addInto(4, Float32Array.from(b));
    expect(values(g)).toEqual([...a].map((x, i) => (i >= 4 ? Math.fround(x + b[i - 4]!) : x)));
  });

  it("refuses elements outside the slice and an unknown dtype", () => {
    const g = sliceGradients(8, "bfloat16");
    expect(() => g.addInto(6, new Float32Array(3))).toThrow(/elements \[6, 9\) lie outside the slice of 8/);
    expect(() => g.read(-1, new Float32Array(1), 1)).toThrow(/elements \[-1, 0\) lie outside the slice of 8/);
    expect(() => sliceGradients(8, "float16" as "float32")).toThrow(/gradient dtype must be one of float32, bfloat16, got float16/);
    expect(() => sliceGradients(-1, "float32")).toThrow(/non-negative integer length, got -1/);
  });
});
