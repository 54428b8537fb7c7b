/**
 * FusedOps' native GELU (tanh approximation) against the float64 reference of
 * @ulysses/kernels (geluForward64 / geluBackward64) on every instruction set
 * this processor runs, and against OrtOps (ONNX Gelu approximate="tanh" and
 * its derived backward graph). Element by element:
 *   forward   |y - ref| <= 1e-5 * max(|ref|, 1e-3)
 *   backward  |dx - ref| <= 1e-5 * max(|ref|, 2e-2 |dy|)
 * The floors are where float32 cannot do better relatively: gelu(x) is tiny
 * for x below -4 (the floor allows an absolute error of 1e-8 there, a tenth
 * of float32's resolution of the O(1) values around it), and gelu'(x)
 * crosses zero near x = -0.75, where it is the difference of two terms of
 * about 0.22, each correct to a few float32 roundings (the floor allows an
 * absolute error of 2e-7 |dy|, about 15 roundings of 0.22). Measured on
 * this project's VM, 3 x 262144 inputs: 1.2e-6 forward and 3.0e-6
 * backward in those units, every instruction set. Skipped, with the reason
 * in the suite's name, only when the native addon is not built.
 */
import { afterAll, describe, expect, it, vi } from "vitest";
import { SessionCache, createOrtOps } from "@ulysses/kernels";
import {
  GELU_C,
  GELU_K,
  geluBackward64,
  geluDerivative,
  geluForward64,
  maxRelativeError,
  randomTensor,
  seededRandom,
  type Real,
} from "@ulysses/kernels/testing";
import { Tensor } from "@ulysses/tensors";
import { FusedAttentionError, FusedOps, createFusedOps, fusedAttentionStatus, type CpuIsa } from "./index.js";
import { loadNative } from "./native.js";
import { opsPerIsa } from "./testing-fixtures/isa-ops.js";

const status = fusedAttentionStatus();
const suite = status.available ? "FusedOps (native GELU)" : `FusedOps (skipped: ${status.reason})`;
if (!status.available) console.warn(`[fused-ops tests] ${status.reason}`);

const TOLERANCE = 1e-5;
const FORWARD_FLOOR = 1e-3;
const BACKWARD_FLOOR = 2e-2; // times |dy|
const nativeIsa = (status.available ? status.info.cpuIsa : "portable") as "avx512" | "avx2" | "portable";
const EXTREMES = [10, -10, 30, -30, 1e4, -1e4, 0, -0, 1e-20, -1e-20, 4, -4, -0.75, 3.5, -3.5];

/** max over elements of |actual - expected| / max(|expected|, floor_i); Infinity for a NaN or a length mismatch. */
function worstError(actual: Real, expected: Real, floor: (i: number) => number): number {
  if (actual.size !== expected.size) return Infinity;
  let worst = 0;
  for (let i = 0; i < expected.size; i++) {
    const a = actual.data[i]!,
      e = expected.data[i]!;
    if (Number.isNaN(a) || Number.isNaN(e)) return Infinity;
    worst = Math.max(worst, Math.abs(a - e) / Math.max(Math.abs(e), floor(i)));
  }
  return worst;
}

const forwardError = (y: Real, ref: Real): number => worstError(y, ref, () => FORWARD_FLOOR);
const backwardError = (dx: Real, ref: Real, dy: Real): number => worstError(dx, ref, (i) => BACKWARD_FLOOR * Math.abs(dy.data[i]!));

/** x uniform in [-6, 6) with the extremes at the front (as many as fit), dy uniform in [-1, 1). */
function inputs(size: number, seed: number): { x: Tensor<"float32">; dy: Tensor<"float32"> } {
  const random = seededRandom(seed);
  const x = randomTensor([size], random, 6);
  x.data.set(EXTREMES.slice(0, size));
  return { x, dy: randomTensor([size], random) };
}

const SIZES = [1, 7, 8, 15, 16, 17, 31, 33, 1000, 1023, (2048 * 1024) / 8, (2048 * 1024) / 8 + 5];

describe.skipIf(!status.available)(suite, () => {
  const cache = new SessionCache({ intraOpThreads: 1 });
  afterAll(() => cache.release());
  // Every instruction set this processor runs (the portable one always).
  const ops = opsPerIsa(cache);
  const isas = [...ops.keys()];

  it("runs on the native instruction set and the portable one", () => {
    expect(isas).toContain("portable");
    expect(isas).toContain(nativeIsa);
    expect(new FusedOps(cache).isa).toBe("auto");
  });

  it.each(SIZES)("forward and backward match the float64 reference, size %i, every instruction set", async (size) => {
    const { x, dy } = inputs(size, 1000 + size);
    const refY = geluForward64(x);
    const refDx = geluBackward64(x, dy);
    for (const [isa, fused] of ops) {
      const y = await fused.geluForward(x);
      const dx = await fused.geluBackward(x, dy);
      expect(forwardError(y, refY), `forward, ${isa}`).toBeLessThanOrEqual(TOLERANCE);
      expect(backwardError(dx, refDx, dy), `backward, ${isa}`).toBeLessThanOrEqual(TOLERANCE);
    }
  });

  it("the backward check would catch a dropped x * sech^2 term", async () => {
    // gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 k x^2): the check above applied to the first term alone fails
    const { x, dy } = inputs(1000, 7);
    const firstTermOnly = new Tensor("float64", x.shape);
    for (let i = 0; i < x.size; i++) {
      const v = x.data[i]!;
      firstTermOnly.data[i] = dy.data[i]! * 0.5 * (1 + Math.tanh(GELU_C * (v + GELU_K * v * v * v)));
    }
    const refDx = geluBackward64(x, dy);
    expect(backwardError(firstTermOnly, refDx, dy)).toBeGreaterThan(1000 * TOLERANCE);
    const dx = await ops.get(nativeIsa)!.geluBackward(x, dy);
    expect(backwardError(dx, refDx, dy)).toBeLessThanOrEqual(TOLERANCE);
    // at x = 1 the second term is 0.24 of gelu'(1) = 1.083
    const one = await ops.get(nativeIsa)!.geluBackward(Tensor.from("float32", [1], [1]), Tensor.from("float32", [1], [1]));
    expect(one.data[0]).toBeCloseTo(geluDerivative(1), 6);
  });

  it("extreme and non-finite inputs: finite results, gelu(+inf) = +inf, gelu(-inf) = 0, NaN propagates", async () => {
    const x = Tensor.from("float32", [9], [1e4, -1e4, 3e38, -3e38, Infinity, -Infinity, NaN, 30, -30]);
    const dy = Tensor.from("float32", [9], [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]);
    for (const [isa, fused] of ops) {
      const y = Array.from((await fused.geluForward(x)).data);
      const dx = Array.from((await fused.geluBackward(x, dy)).data);
      expect(y, isa).toEqual([1e4, -0, Math.fround(3e38), -0, Infinity, -0, NaN, 30, -0]);
      expect(dx, isa).toEqual([0.5, 0, 0.5, 0, 0.5, 0, NaN, 0.5, 0]);
    }
  });

  it("agrees with OrtOps (ONNX Gelu approximate=tanh and its derived backward)", async () => {
    const ort = createOrtOps(cache);
    const fused = createFusedOps(cache);
    const random = seededRandom(11);
    const x = randomTensor([64, 257], random, 6);
    const dy = randomTensor([64, 257], random);
    const refY = geluForward64(x);
    const refDx = geluBackward64(x, dy);
    const [ortY, fusedY] = [await ort.geluForward(x), await fused.geluForward(x)];
    const [ortDx, fusedDx] = [await ort.geluBackward(x, dy), await fused.geluBackward(x, dy)];
    expect(fusedY.shape).toEqual(ortY.shape);
    expect(fusedDx.shape).toEqual(ortDx.shape);
    // ONNX Runtime's own error is larger where gelu is small (x near -5: 6e-7 absolute forward, 3e-6 backward, measured), so the
    // comparison uses the kernels' tests' norm, max |difference| over max |OrtOps'|
    expect(maxRelativeError(fusedY, ortY)).toBeLessThanOrEqual(TOLERANCE);
    expect(maxRelativeError(fusedDx, ortDx)).toBeLessThanOrEqual(TOLERANCE);
    // and element by element no further from the float64 reference than ONNX Runtime is
    expect(forwardError(fusedY, refY)).toBeLessThanOrEqual(Math.max(TOLERANCE, forwardError(ortY, refY)));
    expect(backwardError(fusedDx, refDx, dy)).toBeLessThanOrEqual(Math.max(TOLERANCE, backwardError(ortDx, refDx, dy)));
  });

  it("returns new tensors of x's shape, counted by the cache's garbage collector", async () => {
    const counted = new SessionCache({ intraOpThreads: 1, collectGarbageEvery: 1 << 30 });
    const allocated = vi.spyOn(counted.collector!, "allocated");
    const fused = new FusedOps(counted);
    const random = seededRandom(3);
    const x = randomTensor([2, 3, 5], random, 3);
    const dy = randomTensor([2, 3, 5], random);
    const y = await fused.geluForward(x);
    const dx = await fused.geluBackward(x, dy);
    expect(y.shape).toEqual([2, 3, 5]);
    expect(dx.shape).toEqual([2, 3, 5]);
    expect(y.dtype).toBe("float32");
    expect(y.data).not.toBe(x.data);
    expect(dx.data).not.toBe(dy.data);
    expect(allocated.mock.calls).toEqual([[120], [120]]);
    const scalar = await fused.geluForward(new Tensor("float32", []));
    expect(scalar.shape).toEqual([]);
    expect(scalar.data[0]).toBe(0);
    expect((await fused.geluBackward(new Tensor("float32", [0, 4]), new Tensor("float32", [0, 4]))).shape).toEqual([0, 4]);
    await counted.release();
  });

  it("rejects mismatched shapes and dtypes, naming them", async () => {
    const fused = createFusedOps(cache);
    const x = new Tensor("float32", [2, 3, 5]);
    await expect(fused.geluBackward(x, new Tensor("float32", [2, 3, 4]))).rejects.toThrow(FusedAttentionError);
    await expect(fused.geluBackward(x, new Tensor("float32", [2, 3, 4]))).rejects.toThrow("geluBackward: dy must have the shape of x [2, 3, 5], got [2, 3, 4]");
    await expect(fused.geluBackward(x, new Tensor("float32", [30]))).rejects.toThrow("dy must have the shape of x [2, 3, 5], got [30]");
    await expect(fused.geluForward(new Tensor("float64", [4]) as never)).rejects.toThrow("geluForward: x must be float32, got Tensor(float64, [4])");
    await expect(fused.geluBackward(x, new Tensor("float64", [2, 3, 5]) as never)).rejects.toThrow("geluBackward: dy must be float32");
  });

  it("rejects an unknown instruction set", () => {
    expect(() => new FusedOps(cache, { isa: "sse" as CpuIsa })).toThrow(FusedAttentionError);
    expect(() => createFusedOps(cache, { isa: "sse" as CpuIsa })).toThrow(/isa must be auto, avx512, avx2 or portable, got 'sse'/);
  });

  it("the addon's functions check their arguments", () => {
    const native = loadNative();
    if (!native.ok) throw native.error;
    const { geluForward, geluBackward } = native.binding;
    const a = new Float32Array(8);
    expect(() => geluForward(new Float64Array(8) as never, a)).toThrow(TypeError);
    expect(() => geluForward(new Float64Array(8) as never, a)).toThrow("geluForward(x, y, isa?): x must be a Float32Array, got a Float64Array");
    expect(() => geluForward(a, undefined as never)).toThrow("y must be a Float32Array, got undefined");
    expect(() => geluBackward(a, a, [1, 2] as never)).toThrow("dx must be a Float32Array, got an Array");
    expect(() => geluForward(a, new Float32Array(7))).toThrow(RangeError);
    expect(() => geluForward(a, new Float32Array(7))).toThrow("geluForward(x, y, isa?): y has 7 elements but x has 8");
    expect(() => geluBackward(a, new Float32Array(9), a)).toThrow("geluBackward(x, dy, dx, isa?): dy has 9 elements but x has 8");
    expect(() => geluForward(a, a, 3 as never)).toThrow("isa must be a string, got a number");
    expect(() => geluForward(a, a, "neon")).toThrow(RangeError);
    // in place is fine; a partial overlap is refused
    const buffer = new Float32Array(16);
    expect(() => geluForward(buffer.subarray(0, 8), buffer.subarray(4, 12))).toThrow("y partly overlaps x");
    expect(() => geluBackward(buffer.subarray(0, 8), buffer.subarray(8, 16), buffer.subarray(7, 15))).toThrow("dx partly overlaps x");
    const inPlace = Float32Array.from([1, -1, 2, 0.5, 3, -2, 0, 5, 6]);
    const expected = geluForward64(new Tensor("float32", [9], inPlace.slice()));
    geluForward(inPlace, inPlace);
    expect(forwardError(new Tensor("float32", [9], inPlace), expected)).toBeLessThanOrEqual(TOLERANCE);
  });

  it("results do not depend on where an element sits (vector body or tail)", async () => {
    const { x } = inputs(1000, 5);
    for (const [isa, fused] of ops) {
      const whole = await fused.geluForward(x);
      for (const offset of [1, 3, 13]) {
        const part = await fused.geluForward(new Tensor("float32", [1000 - offset], x.data.slice(offset)));
        expect(Array.from(part.data), `${isa}, offset ${offset}`).toEqual(Array.from(whole.data.subarray(offset)));
      }
    }
  });
});
