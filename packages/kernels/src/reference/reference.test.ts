/**
 * The oracle checked independently: every analytic backward of the float64
 * reference against central finite differences of its own forward, plus
 * hand-computed values. Error norm: maxRelativeError (max abs difference over
 * max abs of the expected tensor).
 */
import { describe, expect, it } from "vitest";
import { Tensor } from "@ulysses/tensors";
import { geluDerivative, geluForward64, geluBackward64, geluScalar, swigluBackward64, swigluForward64 } from "./activations.js";
import { crossEntropyBackward64, crossEntropyForward64, embeddingBackward64, embeddingForward64 } from "./embedding-loss.js";
import { linearBackward64, linearForward64 } from "./linear.js";
import { layerNormBackward64, layerNormForward64, rmsNormBackward64, rmsNormForward64 } from "./norms.js";
import { ropeRotate64 } from "./rope.js";
import { ReferenceOps } from "./ops.js";
import { dot, maxRelativeError, numericalGradient, randomTensor64, seededRandom, randomTensor } from "./testing.js";

const TOL = 1e-6;
const random = seededRandom(1234);

describe("reference backward vs finite differences (float64)", () => {
  it("linear (odd sizes, leading axes, bias)", () => {
    const x = randomTensor64([2, 3, 5], random),
      w = randomTensor64([5, 7], random),
      b = randomTensor64([7], random);
    const probe = randomTensor64([2, 3, 7], random);
    const loss = () => dot(linearForward64(x, w, b), probe);
    const g = linearBackward64(x, w, probe, true);
    expect(maxRelativeError(g.dx, numericalGradient(loss, x))).toBeLessThan(TOL);
    expect(maxRelativeError(g.dw, numericalGradient(loss, w))).toBeLessThan(TOL);
    expect(maxRelativeError(g.db!, numericalGradient(loss, b))).toBeLessThan(TOL);
    expect(linearBackward64(x, w, probe, false).db).toBeUndefined();
  });

  it("layerNorm", () => {
    const x = randomTensor64([3, 7], random, 2),
      gamma = randomTensor64([7], random),
      beta = randomTensor64([7], random);
    const probe = randomTensor64([3, 7], random);
    const loss = () => dot(layerNormForward64(x, gamma, beta, 1e-5).y, probe);
    const { mean, rstd } = layerNormForward64(x, gamma, beta, 1e-5);
    const g = layerNormBackward64(x, gamma, mean, rstd, probe);
    expect(maxRelativeError(g.dx, numericalGradient(loss, x))).toBeLessThan(TOL);
    expect(maxRelativeError(g.dGamma, numericalGradient(loss, gamma))).toBeLessThan(TOL);
    expect(maxRelativeError(g.dBeta, numericalGradient(loss, beta))).toBeLessThan(TOL);
  });

  it("rmsNorm", () => {
    const x = randomTensor64([4, 5], random, 2),
      gamma = randomTensor64([5], random);
    const probe = randomTensor64([4, 5], random);
    const loss = () => dot(rmsNormForward64(x, gamma, 1e-6).y, probe);
    const g = rmsNormBackward64(x, gamma, rmsNormForward64(x, gamma, 1e-6).rstd, probe);
    expect(maxRelativeError(g.dx, numericalGradient(loss, x))).toBeLessThan(TOL);
    expect(maxRelativeError(g.dGamma, numericalGradient(loss, gamma))).toBeLessThan(TOL);
  });

  it("gelu and swiglu", () => {
    const x = randomTensor64([3, 5], random, 4),
      up = randomTensor64([3, 5], random, 2),
      probe = randomTensor64([3, 5], random);
    expect(
      maxRelativeError(
        geluBackward64(x, probe),
        numericalGradient(() => dot(geluForward64(x), probe), x),
      ),
    ).toBeLessThan(TOL);
    const loss = () => dot(swigluForward64(x, up), probe);
    const g = swigluBackward64(x, up, probe);
    expect(maxRelativeError(g.dGate, numericalGradient(loss, x))).toBeLessThan(TOL);
    expect(maxRelativeError(g.dUp, numericalGradient(loss, up))).toBeLessThan(TOL);
  });

  it("rope (backward is the inverse rotation)", () => {
    const x = randomTensor64([2, 3, 2, 6], random),
      probe = randomTensor64([2, 3, 2, 6], random);
    const loss = () => dot(ropeRotate64(x, 5, 10000, 1), probe);
    expect(maxRelativeError(ropeRotate64(probe, 5, 10000, -1), numericalGradient(loss, x))).toBeLessThan(TOL);
    // The rotation is orthogonal: backward(forward(x)) = x.
    expect(maxRelativeError(ropeRotate64(ropeRotate64(x, 5, 500, 1), 5, 500, -1), x)).toBeLessThan(1e-14);
  });

  it("embedding (repeated ids accumulate)", () => {
    const ids = Tensor.from("int32", [5], [2, 0, 2, 3, 2]);
    const table = randomTensor64([4, 3], random),
      probe = randomTensor64([5, 3], random);
    const g = embeddingBackward64(ids, probe, 4);
    expect(
      maxRelativeError(
        g,
        numericalGradient(() => dot(embeddingForward64(ids, table), probe), table),
      ),
    ).toBeLessThan(TOL);
    expect(Array.from(g.data.subarray(3, 6))).toEqual([0, 0, 0]);
  });

  it("cross-entropy with ignored labels", () => {
    const logits = randomTensor64([5, 7], random, 3);
    const labels = Tensor.from("int32", [5], [3, -100, 0, 6, -100]);
    const { count } = crossEntropyForward64(logits, labels);
    expect(count).toBe(3);
    const scale = 1 / count;
    const grad = crossEntropyBackward64(logits, labels, scale);
    const numeric = numericalGradient(() => scale * crossEntropyForward64(logits, labels).lossSum, logits);
    expect(maxRelativeError(grad, numeric)).toBeLessThan(TOL);
    for (const row of [1, 4]) expect(Array.from(grad.data.subarray(row * 7, row * 7 + 7)).every((v) => v === 0)).toBe(true);
  });
});

describe("reference values", () => {
  it("GELU tanh approximation at hand-computed points", () => {
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), evaluated independently.
    const points: [number, number][] = [
      [0, 0],
      [1, 0.8411919906082768],
      [-1, -0.15880800939172324],
      [2, 1.954597694087775],
      [0.5, 0.34571400982514394],
      [-3, -0.0036373920817729943],
    ];
    for (const [x, y] of points) expect(geluScalar(x)).toBeCloseTo(y, 14);
    expect(geluDerivative(0)).toBe(0.5);
  });

  it("cross-entropy of uniform logits is log(vocab) per row; all ignored gives zero count", () => {
    const logits = new Tensor("float64", [2, 5]);
    expect(crossEntropyForward64(logits, Tensor.from("int32", [2], [1, 4])).lossSum).toBeCloseTo(2 * Math.log(5), 14);
    expect(crossEntropyForward64(logits, Tensor.from("int32", [2], [-1, -1]), -1)).toEqual({ lossSum: 0, count: 0, rowLosses: new Float64Array(2) });
    // each row's term: -log(1/5) where counted, 0 where ignored
    const rows = crossEntropyForward64(logits, Tensor.from("int32", [2], [3, -1]), -1).rowLosses;
    expect(rows[0]).toBeCloseTo(Math.log(5), 14);
    expect(rows[1]).toBe(0);
    expect(() => crossEntropyForward64(logits, Tensor.from("int32", [2], [5, 0]))).toThrow(/label 5 at row 0/);
  });

  it("rope rotates pair (i, i + d/2) by pos * base^(-2i/d)", () => {
    // d = 4: pair 0 has angle pos, pair 1 has angle pos / 100 at base 10000.
    const x = Tensor.from("float64", [1, 2, 1, 4], [1, 0, 0, 0, 0, 1, 0, 0]);
    const y = ropeRotate64(x, 3, 10000, 1);
    // token 0 at position 3: pair 0 = (1, 0) -> (cos 3, sin 3)
    expect(y.data[0]).toBeCloseTo(Math.cos(3), 14);
    expect(y.data[2]).toBeCloseTo(Math.sin(3), 14);
    // token 1 at position 4: pair 1 = (1, 0) -> (cos 0.04, sin 0.04)
    expect(y.data[5]).toBeCloseTo(Math.cos(0.04), 14);
    expect(y.data[7]).toBeCloseTo(Math.sin(0.04), 14);
  });

  it("ReferenceOps returns float32 tensors of the right shapes", async () => {
    const ops = new ReferenceOps();
    const x = randomTensor([2, 3, 4], random);
    const y = await ops.linearForward(x, randomTensor([4, 6], random));
    expect(y.dtype).toBe("float32");
    expect(y.shape).toEqual([2, 3, 6]);
    const ln = await ops.layerNormForward(x.reshape([6, 4]), randomTensor([4], random), randomTensor([4], random), 1e-5);
    expect([ln.y.shape, ln.mean.shape, ln.rstd.shape]).toEqual([[6, 4], [6], [6]]);
  });
});
