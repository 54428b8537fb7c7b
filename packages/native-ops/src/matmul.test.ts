/**
 * The addon's matmul (y = x w into a caller array) and FusedOps.linearForward
 * over it for deep products (in at least 16 times out: the tied LM head's
 * dh = dLogits E), against a float64 product in TypeScript, on every
 * instruction set this processor runs, 1-3 threads, with depths past the
 * kernel's 256-deep passes, past its 64-column panels and its last whole
 * vector, and no depth at all. Element by element |y - ref| <= 1e-6 * sum over i of |x w|:
 * float32 accumulation over at most 1500 terms stays far inside it. Skipped,
 * with the reason in the suite's name, only when the native addon is not
 * built.
 */
import { OrtOps, ReferenceOps, SessionCache } from "@ulysses/kernels";
import { seededRandom } from "@ulysses/kernels/testing";
import { Tensor } from "@ulysses/tensors";
import { afterAll, describe, expect, it } from "vitest";
import { FusedOps } from "./index.js";
import { DEEP_PRODUCT_RATIO } from "./fused-ops.js";
import { itOnEveryIsa, nativeBinding, nativeStatus, suiteName, uniformFloats } from "./testing-fixtures/native-kernels.js";

const status = nativeStatus;
const suite = suiteName("matmul (native, deep products)");

/** The worst |actual - x w| / sum |x w|, in float64 (0 for an element whose terms are all 0 and which is 0). */
function worstError(x: Float32Array, w: Float32Array, actual: Float32Array, rows: number, inF: number, outF: number): number {
  let worst = 0;
  for (let r = 0; r < rows; r++) {
    for (let o = 0; o < outF; o++) {
      let sum = 0;
      let scale = 0;
      for (let i = 0; i < inF; i++) {
        const term = x[r * inF + i]! * w[i * outF + o]!;
        sum += term;
        scale += Math.abs(term);
      }
      const error = Math.abs(actual[r * outF + o]! - sum);
      worst = Math.max(worst, error === 0 ? 0 : error / Math.max(scale, 1e-30));
    }
  }
  return worst;
}

describe.skipIf(!status.available)(suite, () => {
  const binding = status.available ? nativeBinding() : null!;
  const cache = new SessionCache({ intraOpThreads: 2 });
  afterAll(() => cache.release());

  // [rows, in, out]: one element, tails of every vector width, several 256-deep passes, a last panel under 64 columns, no depth
  const SHAPES: [number, number, number][] = [
    [1, 1, 1],
    [3, 5, 17],
    [7, 1500, 40],
    [11, 1100, 64],
    [2, 513, 33],
    [5, 1700, 100],
    [4, 0, 24],
    [0, 8, 16],
  ];

  itOnEveryIsa("y = x w over a y full of garbage (float64 reference)", (isa, threads) => {
    const random = seededRandom(31 + threads);
    for (const [rows, inF, outF] of SHAPES) {
      const x = uniformFloats(rows * inF, random);
      const w = uniformFloats(inF * outF, random);
      const y = new Float32Array(rows * outF).fill(Number.NaN);
      binding.matmul(x, w, y, rows, inF, outF, threads, isa);
      expect(worstError(x, w, y, rows, inF, outF), `[${rows}, ${inF}] x [${inF}, ${outF}]`).toBeLessThan(1e-6);
    }
  });

  it("gives the same bits for every thread count (each element sums its depth in one order)", () => {
    const random = seededRandom(9);
    const [rows, inF, outF] = [9, 1200, 72];
    const x = uniformFloats(rows * inF, random);
    const w = uniformFloats(inF * outF, random);
    const results = [1, 2, 3, 7].map((threads) => {
      const y = new Float32Array(rows * outF);
      binding.matmul(x, w, y, rows, inF, outF, threads);
      return y;
    });
    for (const r of results.slice(1)) expect(Buffer.from(r.buffer).equals(Buffer.from(results[0]!.buffer))).toBe(true);
  });

  it("refuses arrays of the wrong size or type, an output overlapping an input, bad counts and an unknown isa, naming each", () => {
    const x = new Float32Array(6);
    const w = new Float32Array(12);
    const y = new Float32Array(8);
    expect(() => binding.matmul(x, w, new Float32Array(7), 2, 3, 4, 1)).toThrow(/matmul\(.*\): y has 7 elements, rows \* out = 8/);
    expect(() => binding.matmul(x, new Float32Array(11), y, 2, 3, 4, 1)).toThrow(/w has 11 elements, in \* out = 12/);
    expect(() => binding.matmul(new Int32Array(6) as unknown as Float32Array, w, y, 2, 3, 4, 1)).toThrow(/x must be a Float32Array/);
    const shared = new Float32Array(24);
    expect(() => binding.matmul(shared.subarray(0, 6), w, shared.subarray(4, 12), 2, 3, 4, 1)).toThrow(/y overlaps x/);
    expect(() => binding.matmul(x, w, y, 2, 3, 4, 0)).toThrow(/threads must be a positive integer, got 0/);
    expect(() => binding.matmul(x, w, y, 2, -3, 4, 1)).toThrow(/in must be a non-negative integer/);
    expect(() => binding.matmul(x, w, y, 2, 3, 4, 1, "sse")).toThrow(/isa must be auto, avx512, avx2 or portable, got 'sse'/);
  });

  it("FusedOps.linearForward: a deep product (leading axes folded into rows) equals ReferenceOps' float64 product; other shapes are OrtOps' graph, bit for bit", async () => {
    const random = seededRandom(4);
    const ops = new FusedOps(cache);
    const ort = new OrtOps(cache);
    const reference = new ReferenceOps();
    const deep = {
      x: new Tensor("float32", [2, 3, 40 * DEEP_PRODUCT_RATIO], uniformFloats(6 * 640, random)),
      w: new Tensor("float32", [640, 40], uniformFloats(640 * 40, random)),
    };
    const y = await ops.linearForward(deep.x, deep.w);
    expect(y.shape).toEqual([2, 3, 40]);
    expect(worstError(deep.x.data, deep.w.data, y.data, 6, 640, 40)).toBeLessThan(1e-6);
    const expected = await reference.linearForward(deep.x, deep.w);
    for (let i = 0; i < y.size; i++) expect(y.data[i]).toBeCloseTo(expected.data[i]!, 4);
    // one column short of deep, and deep with a bias: ONNX Runtime's MatMul and Gemm
    const shallow = {
      x: new Tensor("float32", [5, 16 * 41 - 1], uniformFloats(5 * 655, random)),
      w: new Tensor("float32", [655, 41], uniformFloats(655 * 41, random)),
    };
    const bias = new Tensor("float32", [40], uniformFloats(40, random));
    for (const [x, w, b] of [
      [shallow.x, shallow.w, undefined],
      [deep.x, deep.w, bias],
    ] as const) {
      const fused = await ops.linearForward(x, w, b);
      const graph = await ort.linearForward(x, w, b);
      expect(
        Buffer.from(fused.data.buffer, fused.data.byteOffset, fused.data.byteLength).equals(
          Buffer.from(graph.data.buffer, graph.data.byteOffset, graph.data.byteLength),
        ),
      ).toBe(true);
    }
    await expect(ops.linearForward(deep.x, new Tensor("float32", [641, 40]))).rejects.toThrow(/w must be \[in=640, out\]/);
  });
});
