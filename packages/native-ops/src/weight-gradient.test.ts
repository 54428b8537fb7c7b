/**
 * The addon's in-place weight gradient (weightGradient, and FusedOps'
 * linearWeightGradientInto over it): into [in, out] += x [rows, in]^T
 * dy [rows, out], against a float64 sum in TypeScript, on every instruction
 * set this processor runs, 1-3 threads, with rows past the kernel's
 * 256-row passes, columns past its last whole vector, and tall products
 * (the tied LM head's shape) that it runs rows-outer. Element by element
 * |into - ref| <= 1e-6 * (|into0| + sum over rows of |x dy|): float32
 * accumulation over at most 600 terms stays far inside it. Skipped, with
 * the reason in the suite's name, only when the native addon is not built.
 */
import { ReferenceOps, SessionCache } from "@ulysses/kernels";
import { seededRandom } from "@ulysses/kernels/testing";
import { Tensor } from "@ulysses/tensors";
import { afterAll, describe, expect, it } from "vitest";
import { FusedAttentionError, FusedOps } from "./index.js";
import { itOnEveryIsa, nativeBinding, nativeStatus, suiteName, uniformFloats } from "./testing-fixtures/native-kernels.js";

const status = nativeStatus;
const suite = suiteName("weightGradient (native, in place)");

/** The worst |actual - (into0 + x^T dy)| / (|into0| + sum |x dy|), in float64. */
function worstError(x: Float32Array, dy: Float32Array, into0: Float32Array, actual: Float32Array, rows: number, inF: number, outF: number): number {
  let worst = 0;
  for (let i = 0; i < inF; i++) {
    for (let o = 0; o < outF; o++) {
      let sum = into0[i * outF + o]!;
      let scale = Math.abs(sum);
      for (let r = 0; r < rows; r++) {
        const term = x[r * inF + i]! * dy[r * outF + o]!;
        sum += term;
        scale += Math.abs(term);
      }
      worst = Math.max(worst, Math.abs(actual[i * outF + o]! - sum) / Math.max(scale, 1e-30));
    }
  }
  return worst;
}

describe.skipIf(!status.available)(suite, () => {
  const binding = status.available ? nativeBinding() : null!;
  const cache = new SessionCache({ intraOpThreads: 2 });
  afterAll(() => cache.release());

  // [rows, in, out]: one element, tails of every vector width, several 256-row passes, a head tile's proportions, and
  // tall products (in at least 16 times a thread's columns) that the kernel runs rows-outer, in one pass and in two
  const SHAPES: [number, number, number][] = [
    [1, 1, 1],
    [3, 5, 17],
    [600, 7, 33],
    [64, 40, 1000],
    [257, 16, 48],
    [0, 4, 8],
    [70, 1100, 48],
    [300, 900, 40],
  ];

  itOnEveryIsa("adds x^T dy into a non-zero gradient (float64 reference)", (isa, threads) => {
    const random = seededRandom(17 + threads);
    for (const [rows, inF, outF] of SHAPES) {
      const x = uniformFloats(rows * inF, random);
      const dy = uniformFloats(rows * outF, random);
      const into0 = uniformFloats(inF * outF, random);
      const into = Float32Array.from(into0);
      binding.weightGradient(x, dy, into, rows, inF, outF, threads, isa);
      expect(worstError(x, dy, into0, into, rows, inF, outF), `[${rows}, ${inF}] x [${rows}, ${outF}]`).toBeLessThan(1e-6);
    }
  });

  // the second shape runs columns-outer on one thread (64 columns: 1000 rows of the result are under 16 x 64) and rows-outer
  // on two or more: the tile order does not change an element's sum
  it("gives the same bits for every thread count and either tile order (each element sums its rows in one order)", () => {
    const random = seededRandom(5);
    for (const [rows, inF, outF] of [
      [300, 24, 200],
      [300, 1000, 64],
    ] as const) {
      const x = uniformFloats(rows * inF, random);
      const dy = uniformFloats(rows * outF, random);
      const results = [1, 2, 3, 7].map((threads) => {
        const into = new Float32Array(inF * outF);
        binding.weightGradient(x, dy, into, rows, inF, outF, threads);
        return into;
      });
      for (const r of results.slice(1))
        expect(Buffer.from(r.buffer).equals(Buffer.from(results[0]!.buffer)), `[${rows}, ${inF}] x [${rows}, ${outF}]`).toBe(true);
    }
  });

  it("refuses arrays of the wrong size or type, an output overlapping an input, bad counts and an unknown isa, naming each", () => {
    const x = new Float32Array(6);
    const dy = new Float32Array(8);
    const into = new Float32Array(12);
    expect(() => binding.weightGradient(x, dy, new Float32Array(11), 2, 3, 4, 1)).toThrow(/into has 11 elements, in \* out = 12/);
    expect(() => binding.weightGradient(x, new Float32Array(9), into, 2, 3, 4, 1)).toThrow(/dy has 9 elements, rows \* out = 8/);
    expect(() => binding.weightGradient(new Int32Array(6) as unknown as Float32Array, dy, into, 2, 3, 4, 1)).toThrow(
      /x must be a Float32Array, got an Int32Array/,
    );
    const shared = new Float32Array(20);
    expect(() => binding.weightGradient(shared.subarray(0, 6), dy, shared.subarray(4, 16), 2, 3, 4, 1)).toThrow(/into overlaps x/);
    expect(() => binding.weightGradient(x, dy, into, 2, 3, 4, 0)).toThrow(/threads must be a positive integer, got 0/);
    expect(() => binding.weightGradient(x, dy, into, 2.5, 3, 4, 1)).toThrow(/rows must be a non-negative integer, got 2.5/);
    expect(() => binding.weightGradient(x, dy, into, 2, 3, 4, 1, "sse")).toThrow(/isa must be auto, avx512, avx2 or portable, got 'sse'/);
  });

  it("FusedOps.linearWeightGradientInto: leading axes folded into rows, equal to ReferenceOps' float64 weight gradient added in", async () => {
    const ops = new FusedOps(cache);
    const random = seededRandom(9);
    const x = new Tensor("float32", [2, 70, 24], uniformFloats(2 * 70 * 24, random));
    const dy = new Tensor("float32", [2, 70, 40], uniformFloats(2 * 70 * 40, random));
    const into0 = uniformFloats(24 * 40, random);
    const into = new Tensor("float32", [24, 40], Float32Array.from(into0));
    await ops.linearWeightGradientInto(x, dy, into);
    const dw = await new ReferenceOps().linearWeightGradient(x, dy);
    let worst = 0;
    for (let i = 0; i < into.size; i++) worst = Math.max(worst, Math.abs(into.data[i]! - (into0[i]! + dw.data[i]!)) / (1 + Math.abs(dw.data[i]!)));
    expect(worst).toBeLessThan(1e-5);
    expect(worstError(x.data, dy.data, into0, into.data, 140, 24, 40)).toBeLessThan(1e-6);
  });

  it("FusedOps.linearWeightGradientInto refuses mismatched rows and a gradient of the wrong shape", async () => {
    const ops = new FusedOps(cache);
    const x = new Tensor("float32", [5, 3]);
    await expect(ops.linearWeightGradientInto(x, new Tensor("float32", [4, 2]), new Tensor("float32", [3, 2]))).rejects.toThrow(FusedAttentionError);
    await expect(ops.linearWeightGradientInto(x, new Tensor("float32", [4, 2]), new Tensor("float32", [3, 2]))).rejects.toThrow(
      /must share their leading axes/,
    );
    await expect(ops.linearWeightGradientInto(x, new Tensor("float32", [5, 2]), new Tensor("float32", [2, 3]))).rejects.toThrow(/into must be \[3, 2\]/);
  });
});
