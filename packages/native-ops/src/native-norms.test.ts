/**
 * FusedOps' native LayerNorm and rotary embedding (forward and backward)
 * against the float64 references of @ulysses/kernels (layerNormForward64 /
 * layerNormBackward64, ropeRotate64 with the angle's sign), on every
 * instruction set this processor runs, and against OrtOps (the ONNX graphs
 * they replace). Rope's backward is also checked as the transpose of its
 * forward (<rope(x), y> = <x, rope^T(y)> in float64), independently of the
 * reference. With linear and llama3 RoPE scaling too (FusedOps reads OrtOps'
 * scaled tables). Tolerances: 1e-5 of the largest reference value (maxRelativeError);
 * measured on this project's VM: 3.9e-7 (LayerNorm forward), 6.6e-7 (its
 * backward) and 1.2e-7 (rope). The binding's argument checks are tested here
 * too. Skipped, with the reason in the suite's name, only when the native
 * addon is not built.
 */
import { afterAll, describe, expect, it } from "vitest";
import { SessionCache, createOrtOps, type RopePositions, type RopeScaling } from "@ulysses/kernels";
import { layerNormBackward64, layerNormForward64, maxRelativeError, randomTensor, ropeRotate64, seededRandom } from "@ulysses/kernels/testing";
import { Tensor } from "@ulysses/tensors";
import { fusedAttentionStatus } from "./index.js";
import { loadNative } from "./native.js";
import { opsPerIsa } from "./testing-fixtures/isa-ops.js";

const status = fusedAttentionStatus();
const suite = status.available ? "FusedOps (native LayerNorm and rope)" : `FusedOps LayerNorm and rope (skipped: ${status.reason})`;

const TOLERANCE = 1e-5;

/** Rows of LayerNorm: h below, at and past the vector widths (8, 16), and the model's 256 and 1024. */
const NORM_SHAPES: number[][] = [
  [1, 1],
  [3, 5],
  [7, 16],
  [33, 17],
  [2, 3, 256],
  [300, 255],
  [64, 1024],
];

/** Rope shapes [batch, seq, heads, headDim]: half = headDim / 2 below, at and past the vector widths. */
const ROPE_SHAPES: [number, number, number, number][] = [
  [1, 5, 2, 4],
  [2, 33, 3, 32],
  [1, 64, 8, 34],
  [2, 17, 1, 64],
];

describe.skipIf(!status.available)(suite, () => {
  const cache = new SessionCache({ intraOpThreads: 1 });
  afterAll(() => cache.release());
  const ops = opsPerIsa(cache);
  const ort = createOrtOps(cache);

  it.each(NORM_SHAPES)("LayerNorm forward and backward match the float64 reference, [%i, %i, ...], every instruction set", async (...shape) => {
    const random = seededRandom(shape.reduce((a, b) => a * 31 + b, 7));
    const h = shape[shape.length - 1]!;
    // an offset mean (3) and a spread (2): the variance is taken about the mean
    const x = randomTensor(shape, random, 2);
    for (let i = 0; i < x.size; i++) x.data[i]! += 3;
    const gamma = randomTensor([h], random);
    const beta = randomTensor([h], random);
    const dy = randomTensor(shape, random);
    const ref = layerNormForward64(x, gamma, beta, 1e-5);
    const refGrad = layerNormBackward64(x, gamma, ref.mean, ref.rstd, dy);
    for (const [isa, fused] of ops) {
      const out = await fused.layerNormForward(x, gamma, beta, 1e-5);
      expect(out.y.shape, isa).toEqual(shape);
      expect(maxRelativeError(out.y, ref.y), `y, ${isa}`).toBeLessThanOrEqual(TOLERANCE);
      expect(maxRelativeError(out.mean, ref.mean), `mean, ${isa}`).toBeLessThanOrEqual(TOLERANCE);
      expect(maxRelativeError(out.rstd, ref.rstd), `rstd, ${isa}`).toBeLessThanOrEqual(TOLERANCE);
      const g = await fused.layerNormBackward(x, gamma, out, dy);
      expect(maxRelativeError(g.dx, refGrad.dx), `dx, ${isa}`).toBeLessThanOrEqual(TOLERANCE);
      expect(maxRelativeError(g.dGamma, refGrad.dGamma), `dGamma, ${isa}`).toBeLessThanOrEqual(TOLERANCE);
      expect(maxRelativeError(g.dBeta, refGrad.dBeta), `dBeta, ${isa}`).toBeLessThanOrEqual(TOLERANCE);
    }
  });

  it("LayerNorm agrees with OrtOps' graphs, and checks shapes as OrtOps does", async () => {
    const random = seededRandom(5);
    const x = randomTensor([2, 100, 256], random);
    const gamma = randomTensor([256], random);
    const beta = randomTensor([256], random);
    const dy = randomTensor([2, 100, 256], random);
    const fused = ops.get("portable")!;
    const a = await fused.layerNormForward(x, gamma, beta, 1e-5);
    const b = await ort.layerNormForward(x, gamma, beta, 1e-5);
    expect(maxRelativeError(a.y, b.y)).toBeLessThan(1e-6);
    const ga = await fused.layerNormBackward(x, gamma, a, dy);
    const gb = await ort.layerNormBackward(x, gamma, b, dy);
    for (const k of ["dx", "dGamma", "dBeta"] as const) expect(maxRelativeError(ga[k], gb[k]), k).toBeLessThan(1e-5);
    await expect(fused.layerNormForward(x, randomTensor([255], random), beta, 1e-5)).rejects.toThrow(
      /layerNormForward: gamma must have shape \[256\], got \[255\]/,
    );
    await expect(fused.layerNormBackward(x, gamma, { mean: a.mean, rstd: randomTensor([7], random) }, dy)).rejects.toThrow(/layerNormBackward: rstd/);
  });

  it.each(ROPE_SHAPES)("rope forward and backward match the float64 reference, [%i, %i, %i, %i], offset and per-token positions", async (...shape) => {
    const random = seededRandom(shape.reduce((a, b) => a * 31 + b, 3));
    const x = randomTensor(shape, random);
    const [batch, seq] = shape;
    const perToken = new Int32Array(batch * seq);
    for (let i = 0; i < perToken.length; i++) perToken[i] = (i * 7) % 23; // restarts, as packed documents do
    const llama3: RopeScaling = { type: "llama3", factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 64 };
    const cases: [RopePositions, number, RopeScaling?][] = [
      [0, 10000],
      [1000, 10000],
      [5, 500],
      [perToken, 10000],
      [1000, 10000, llama3],
      [perToken, 500, { type: "linear", factor: 2 }],
    ];
    for (const [positions, base, scaling] of cases) {
      const forward = ropeRotate64(x, positions, base, 1, "rope", scaling);
      const backward = ropeRotate64(x, positions, base, -1, "rope", scaling);
      const label = `${typeof positions === "number" ? `offset ${positions}` : "per-token"}, base ${base}, scaling ${scaling?.type ?? "none"}`;
      for (const [isa, fused] of ops) {
        const y = await fused.ropeForward(x, positions, base, scaling);
        expect(maxRelativeError(y, forward), `forward, ${label}, ${isa}`).toBeLessThanOrEqual(TOLERANCE);
        expect(maxRelativeError(await fused.ropeBackward(x, positions, base, scaling), backward), `backward, ${label}, ${isa}`).toBeLessThanOrEqual(TOLERANCE);
        if (scaling !== undefined && shape[3]! > 2)
          // the scaling reaches the tables (pair 0 keeps its frequency; wider heads differ)
          expect(maxRelativeError(y, ropeRotate64(x, positions, base, 1)), `scaled differs from plain, ${label}, ${isa}`).toBeGreaterThan(1e-4);
      }
      const ortForward = await ort.ropeForward(x, positions, base, scaling);
      expect(maxRelativeError(await ops.get("portable")!.ropeForward(x, positions, base, scaling), ortForward), `OrtOps, ${label}`).toBeLessThan(1e-6);
    }
  });

  it("rope's backward is the transpose of its forward", async () => {
    const random = seededRandom(9);
    const x = randomTensor([2, 40, 3, 18], random);
    const y = randomTensor([2, 40, 3, 18], random);
    const dot = (a: Tensor<"float32">, b: Tensor<"float32">) => a.data.reduce((s, v, i) => s + v * b.data[i]!, 0);
    for (const [isa, fused] of ops) {
      const lhs = dot(await fused.ropeForward(x, 3), y);
      const rhs = dot(x, await fused.ropeBackward(y, 3));
      expect(Math.abs(lhs - rhs) / Math.abs(lhs), isa).toBeLessThan(1e-6);
      // and not the forward again: a sign slip would pass the size checks
      expect(Math.abs(dot(await fused.ropeForward(y, 3), x) - lhs) / Math.abs(lhs), isa).toBeGreaterThan(1e-3);
    }
  });

  it("empty inputs give empty outputs", async () => {
    const fused = ops.get("portable")!;
    expect((await fused.ropeForward(new Tensor("float32", [1, 0, 2, 4]), 0)).shape).toEqual([1, 0, 2, 4]);
    const ln = await fused.layerNormForward(new Tensor("float32", [0, 8]), new Tensor("float32", [8]), new Tensor("float32", [8]), 1e-5);
    expect([ln.y.shape, ln.mean.shape]).toEqual([[0, 8], [0]]);
  });

  it("the binding checks its arguments", () => {
    const native = loadNative();
    if (!native.ok) throw native.error;
    const b = native.binding;
    const f = (n: number) => new Float32Array(n);
    // rope: x [tokens, heads, headDim], tables [tableRows, headDim]
    expect(() => b.rope(f(24), f(12), f(12), f(24), 3, 2, 4, 3, false, 1)).not.toThrow();
    expect(() => b.rope(f(18), f(9), f(9), f(18), 3, 2, 3, 3, false, 1)).toThrow(/headDim must be even, got 3/);
    expect(() => b.rope(f(24), f(8), f(8), f(24), 3, 2, 4, 2, false, 1)).toThrow(/tokens \(3\) must be a multiple of tableRows \(2\)/);
    expect(() => b.rope(f(23), f(12), f(12), f(24), 3, 2, 4, 3, false, 1)).toThrow(/x has 23 elements, tokens \* heads \* headDim = 24/);
    expect(() => b.rope(f(24), f(12), f(11), f(24), 3, 2, 4, 3, false, 1)).toThrow(/sin has 11 elements, tableRows \* headDim = 12/);
    expect(() => b.rope(f(24), f(12), f(12), f(24), 3, 2, 4, 3, 1 as unknown as boolean, 1)).toThrow(/backward must be a boolean, got a number/);
    expect(() => b.rope(f(24), f(12), f(12), f(24), 3, 2, 4, 0, false, 1)).toThrow(/tableRows must be a positive integer, got 0/);
    const shared = f(40);
    expect(() => b.rope(shared.subarray(0, 24), f(12), f(12), shared.subarray(8, 32), 3, 2, 4, 3, false, 1)).toThrow(/y overlaps x/);
    const table = f(12);
    expect(() => b.rope(f(24), table, f(12), f(24), 3, 2, 4, 3, false, 1, "sse")).toThrow(/isa must be auto, avx512, avx2 or portable, got 'sse'/);
    // LayerNorm: x [rows, h], gamma and beta [h], mean and rstd [rows]
    expect(() => b.layerNormForward(f(6), f(3), f(3), f(6), f(2), f(2), 2, 3, 1e-5, 1)).not.toThrow();
    expect(() => b.layerNormForward(f(6), f(3), f(3), f(6), f(2), f(2), 2, 3, 0, 1)).toThrow(/eps must be a positive number, got 0/);
    expect(() => b.layerNormForward(f(6), f(3), f(3), f(6), f(2), f(3), 2, 3, 1e-5, 1)).toThrow(/rstd has 3 elements, rows = 2/);
    const x = f(6);
    expect(() => b.layerNormForward(x, f(3), f(3), x, f(2), f(2), 2, 3, 1e-5, 1)).toThrow(/y overlaps x/);
    const out = f(8);
    expect(() => b.layerNormForward(f(6), f(3), f(3), f(6), out.subarray(0, 2), out.subarray(1, 3), 2, 3, 1e-5, 1)).toThrow(/mean overlaps rstd/);
    expect(() => b.layerNormBackward(f(6), f(3), f(2), f(2), f(6), f(6), f(3), f(3), 2, 3, 1)).not.toThrow();
    expect(() => b.layerNormBackward(f(6), f(3), f(2), f(2), f(6), f(6), f(3), f(4), 2, 3, 1)).toThrow(/dBeta has 4 elements, h = 3/);
    expect(() => b.layerNormBackward(f(6), f(3), f(2), f(2), f(6), f(6), f(3), f(3), -1, 3, 1)).toThrow(/rows must be a non-negative integer, got -1/);
  });

  it("threads split the rows: the same bits for 1, 2 and 3 threads", () => {
    const native = loadNative();
    if (!native.ok) throw native.error;
    const b = native.binding;
    const random = seededRandom(12);
    // rope: 2 rows of 1000 tokens with a shared table (token t uses row t % 1000), split at tokens 666 and 1333 by 3 threads
    const [tokens, heads, d, tableRows] = [2000, 8, 32, 1000];
    const x = randomTensor([tokens * heads * d], random).data;
    const cos = randomTensor([tableRows * d], random).data;
    const sin = randomTensor([tableRows * d], random).data;
    const rope = (threads: number, backward: boolean) => {
      const y = new Float32Array(x.length);
      b.rope(x, cos, sin, y, tokens, heads, d, tableRows, backward, threads);
      return Array.from(y);
    };
    // LayerNorm: 1100 rows of 256 (5 chunks of 256 rows, the last partial)
    const [rows, h] = [1100, 256];
    const lx = randomTensor([rows * h], random).data;
    const gamma = randomTensor([h], random).data;
    const beta = randomTensor([h], random).data;
    const dy = randomTensor([rows * h], random).data;
    const norm = (threads: number) => {
      const [y, mean, rstd, dx, dGamma, dBeta] = [rows * h, rows, rows, rows * h, h, h].map((n) => new Float32Array(n)) as Float32Array[];
      b.layerNormForward(lx, gamma, beta, y!, mean!, rstd!, rows, h, 1e-5, threads);
      b.layerNormBackward(lx, gamma, mean!, rstd!, dy, dx!, dGamma!, dBeta!, rows, h, threads);
      return [y, mean, rstd, dx, dGamma, dBeta].map((a) => Array.from(a!));
    };
    const one = { forward: rope(1, false), backward: rope(1, true), norm: norm(1) };
    for (const threads of [2, 3]) {
      expect(rope(threads, false), `rope forward, ${threads} threads`).toEqual(one.forward);
      expect(rope(threads, true), `rope backward, ${threads} threads`).toEqual(one.backward);
      expect(norm(threads), `LayerNorm, ${threads} threads`).toEqual(one.norm);
    }
    expect(() => b.rope(x, cos, sin, new Float32Array(x.length), tokens, heads, d, tableRows, false, 0)).toThrow(/threads must be a positive integer, got 0/);
  });

  it("rope in place (y is x) equals rope into a fresh array", () => {
    const native = loadNative();
    if (!native.ok) throw native.error;
    const random = seededRandom(4);
    const x = randomTensor([6, 2, 8], random).data;
    const cos = randomTensor([6, 8], random).data;
    const sin = randomTensor([6, 8], random).data;
    const fresh = new Float32Array(x.length);
    native.binding.rope(x, cos, sin, fresh, 6, 2, 8, 6, true, 1);
    const inPlace = x.slice();
    native.binding.rope(inPlace, cos, sin, inPlace, 6, 2, 8, 6, true, 1);
    expect(Array.from(inPlace)).toEqual(Array.from(fresh));
  });
});
