import { createFusedOps, fusedAttentionStatus } from "@ulysses/native-ops";
import { SessionCache } from "@ulysses/kernels";
import { afterAll, describe, expect, it } from "vitest";
import { AdamW } from "./adamw.js";
import { learningRateAt } from "./lr-schedule.js";
import { clipGradNorm } from "./grad-clip.js";

/** Float64 AdamW written from the paper's algorithm, independent of adamw.ts. */
function referenceAdamW(p0: number[], grads: number[][], lrs: number[], b1: number, b2: number, eps: number, wd: number, decay: boolean[]): number[] {
  const p = [...p0];
  const m = p.map(() => 0);
  const v = p.map(() => 0);
  grads.forEach((g, t) => {
    for (let i = 0; i < p.length; i++) {
      m[i] = b1 * m[i]! + (1 - b1) * g[i]!;
      v[i] = b2 * v[i]! + (1 - b2) * g[i]! ** 2;
      const mHat = m[i]! / (1 - b1 ** (t + 1));
      const vHat = v[i]! / (1 - b2 ** (t + 1));
      p[i] = p[i]! - lrs[t]! * (mHat / (Math.sqrt(vHat) + eps) + (decay[i] ? wd * p[i]! : 0));
    }
  });
  return p;
}

describe("AdamW", () => {
  it("updateInParts reads the gradient a part at a time and gives update's bits (parts of 1, 7 and 64 elements, a decay mask)", () => {
    const n = 50;
    const grads = Array.from({ length: 3 }, (_, t) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 1.7 + t) * (i % 5 === 0 ? 1e-4 : 1)));
    const mask = Uint8Array.from({ length: n }, (_, i) => i % 3);
    const whole = new AdamW({ offset: 0, length: n, decayMask: mask.map((x) => (x === 0 ? 0 : 1)) });
    const want = Float32Array.from({ length: n }, (_, i) => 1 - i / n);
    for (const [t, g] of grads.entries()) whole.update(want, g, 0.01 * (t + 1), true);
    for (const part of [1, 7, 64]) {
      const opt = new AdamW({ offset: 0, length: n, decayMask: mask.map((x) => (x === 0 ? 0 : 1)) });
      const got = Float32Array.from({ length: n }, (_, i) => 1 - i / n);
      const reads: number[] = [];
      for (const [t, g] of grads.entries())
        opt.updateInParts(
          got,
          0.01 * (t + 1),
          (from, out) => {
            reads.push(from);
            out.set(g.subarray(from, from + out.length));
          },
          new Float32Array(part),
        );
      expect([...got], `parts of ${part}`).toEqual([...want]);
      expect([...opt.m, ...opt.v]).toEqual([...whole.m, ...whole.v]);
      expect(opt.step).toBe(3);
      expect(reads.length).toBe(3 * Math.ceil(n / part));
    }
    expect(() => whole.updateInParts(new Float32Array(n - 1), 0.01, () => undefined, new Float32Array(4))).toThrow(
      /AdamW slice of 50 elements given params of 49/,
    );
  });

  it("first step moves each weight by about lr against the gradient's sign (bias correction)", () => {
    const opt = new AdamW({ offset: 0, length: 3 }, { weightDecay: 0 });
    const p = new Float32Array([1, 2, 3]);
    opt.update(p, new Float32Array([0.5, -3, 1e-3]), 0.01);
    expect(p[0]).toBeCloseTo(0.99, 6);
    expect(p[1]).toBeCloseTo(2.01, 6);
    expect(p[2]).toBeCloseTo(2.99, 4);
  });

  it("matches a float64 reference for five steps, with decoupled decay on masked entries only", () => {
    const p0 = [0.3, -1.2, 2.5, 0.01];
    const grads = [
      [0.1, -0.2, 0.3, 0.0],
      [0.05, 0.4, -0.1, 1.0],
      [-0.3, 0.1, 0.2, -0.5],
      [0.2, 0.0, 0.0, 0.25],
      [0.01, -0.02, 0.5, 0.1],
    ];
    const lrs = [1e-2, 2e-2, 3e-2, 2e-2, 1e-2];
    const decay = [true, false, true, true];
    const expected = referenceAdamW(p0, grads, lrs, 0.9, 0.95, 1e-8, 0.1, decay);
    const opt = new AdamW({ offset: 0, length: 4, decayMask: Uint8Array.from(decay, Number) }, { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
    const p = Float32Array.from(p0);
    grads.forEach((g, t) => opt.update(p, Float32Array.from(g), lrs[t]!));
    for (let i = 0; i < 4; i++) expect(Math.abs(p[i]! - expected[i]!)).toBeLessThan(1e-6 * (1 + Math.abs(expected[i]!)));
    expect(opt.step).toBe(5);
  });

  it("updates only its slice of the flat vector (ZeRO-1 layout)", () => {
    const whole = new AdamW({ offset: 0, length: 6 });
    const parts = [new AdamW({ offset: 0, length: 2 }), new AdamW({ offset: 2, length: 4 })];
    const pWhole = new Float32Array([1, 2, 3, 4, 5, 6]);
    const pParts = pWhole.slice();
    const g = new Float32Array([0.1, -0.1, 0.2, -0.2, 0.3, -0.3]);
    whole.update(pWhole, g, 0.1);
    for (const part of parts) part.update(pParts, g, 0.1);
    expect([...pParts]).toEqual([...pWhole]);
    const sliceParams = new Float32Array([3, 4, 5, 6]);
    new AdamW({ offset: 2, length: 4 }).update(sliceParams, g.subarray(2), 0.1, true);
    expect([...sliceParams]).toEqual([...pWhole.subarray(2)]);
  });

  it("holds its moments resident from construction, as every step after the first does (the first step's peak is the run's)", () => {
    // 32M elements: 2 x 128 MiB of moments. An untouched Float32Array adds nothing to the resident set.
    const length = 32 * 2 ** 20;
    const before = process.memoryUsage().rss;
    const opt = new AdamW({ offset: 0, length });
    const grown = process.memoryUsage().rss - before;
    expect(grown).toBeGreaterThan(0.9 * 2 * length * Float32Array.BYTES_PER_ELEMENT);
    expect(opt.m[length - 1]).toBe(0);
    expect(opt.v[0]).toBe(0);
  });
});

describe("learning-rate schedule", () => {
  const s = { peak: 1e-3, warmupSteps: 10, totalSteps: 110, minLr: 1e-4 };
  it("warms up linearly, peaks, then follows the cosine to the floor", () => {
    expect(learningRateAt(0, s)).toBeCloseTo(1e-4, 12);
    expect(learningRateAt(4, s)).toBeCloseTo(5e-4, 12);
    expect(learningRateAt(10, s)).toBeCloseTo(1e-3, 12);
    // halfway through the decay: min + (peak - min) / 2
    expect(learningRateAt(10 + 99 / 2, s)).toBeCloseTo(5.5e-4, 12);
    expect(learningRateAt(109, s)).toBeCloseTo(1e-4, 12);
    expect(learningRateAt(500, s)).toBeCloseTo(1e-4, 12);
  });
});

describe("gradient clipping", () => {
  it("scales to the max norm and reports the norm before clipping", async () => {
    const g = new Float32Array([3, 4]);
    expect(await clipGradNorm(g, 1)).toBeCloseTo(5, 6);
    expect(Math.hypot(g[0]!, g[1]!)).toBeCloseTo(1, 5);
    const small = new Float32Array([0.3, 0.4]);
    expect(await clipGradNorm(small, 1)).toBeCloseTo(0.5, 6);
    expect([...small]).toEqual([Math.fround(0.3), Math.fround(0.4)]);
    await expect(clipGradNorm(new Float32Array([NaN]), 1)).rejects.toThrow(/NaN/);
  });
});

/**
 * BlockOps.adamwUpdate (FusedOps: the addon's float64 loop) against this
 * package's JavaScript loop: the same bits for every element of params, m
 * and v after each of 6 steps, with a decay mask and without, on a whole
 * vector and on a ZeRO-1 slice, including zeros, tiny and huge gradients.
 * Skipped, with the reason in the suite's name, when the addon is not built.
 */
const native = fusedAttentionStatus();
describe(native.available ? "AdamW with FusedOps' native update" : `AdamW with FusedOps' native update (skipped: ${native.reason})`, () => {
  const cache = new SessionCache({ intraOpThreads: 1 });
  afterAll(() => cache.release());

  function data(n: number, seed: number, scale: number): Float32Array {
    let s = seed;
    return Float32Array.from({ length: n }, (_, i) => {
      s = (s * 1103515245 + 12345) % 2147483648;
      const u = s / 2147483648 - 0.5;
      return i % 97 === 0 ? 0 : i % 89 === 0 ? u * 1e-30 : i % 83 === 0 ? u * 1e30 : u * scale;
    });
  }

  for (const [name, withMask, sliceOnly] of [
    ["whole vector, decay mask", true, false],
    ["whole vector, decay everywhere", false, false],
    ["ZeRO-1 slice", true, true],
  ] as const) {
    it.skipIf(!native.available)(`bit-identical to the JavaScript loop: ${name}`, () => {
      const ops = createFusedOps(cache);
      expect(ops.adamwUpdate).toBeTypeOf("function");
      const n = 1037;
      const offset = 300;
      const length = sliceOnly ? 500 : n;
      const mask = withMask ? Uint8Array.from({ length }, (_, i) => (i % 3 === 0 ? 0 : 1)) : null;
      const options = { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 };
      const slice = { offset: sliceOnly ? offset : 0, length, decayMask: mask };
      const js = new AdamW(slice, options);
      const fast = new AdamW(slice, options);
      const p0 = data(sliceOnly ? length : n, 7, 4);
      const pJs = p0.slice();
      const pFast = p0.slice();
      for (let step = 0; step < 6; step++) {
        const g = data(sliceOnly ? length : n, 100 + step, 2);
        const lr = 1e-3 * (step + 1);
        js.update(pJs, g, lr, sliceOnly);
        fast.update(pFast, g, lr, sliceOnly, (u) => ops.adamwUpdate!(u));
        expect(Buffer.from(pFast.buffer).equals(Buffer.from(pJs.buffer)), `params after step ${step + 1}`).toBe(true);
        expect(Buffer.from(fast.m.buffer).equals(Buffer.from(js.m.buffer)), `m after step ${step + 1}`).toBe(true);
        expect(Buffer.from(fast.v.buffer).equals(Buffer.from(js.v.buffer)), `v after step ${step + 1}`).toBe(true);
      }
      expect(fast.step).toBe(6);
    });
  }
});
