/**
 * OrtOps against the float64 ReferenceOps, forward and backward, on small
 * shapes including odd sizes. Error norm: maxRelativeError = max |ort - ref|
 * / max |ref| over the tensor; the bound is 1e-5.
 */
import { afterAll, describe, expect, it } from "vitest";
import { concat, narrow, Tensor } from "@ulysses/tensors";
import { ReferenceOps } from "../reference/ops.js";
import { maxRelativeError, randomTensor, seededRandom } from "../reference/testing.js";
import { SessionCache } from "../runtime/session-cache.js";
import { createOrtOps, OrtOps } from "./ort-ops.js";

const TOL = 1e-5;
const cache = new SessionCache({ intraOpThreads: 1 });
afterAll(() => cache.release());
const ort = new OrtOps(cache);
const ref = new ReferenceOps();
const random = seededRandom(7);
const rand = (shape: number[], scale = 1) => randomTensor(shape, random, scale);

function close(actual: Tensor<"float32">, expected: Tensor<"float32">, what: string): void {
  expect(actual.shape, what).toEqual(expected.shape);
  expect(maxRelativeError(actual, expected), what).toBeLessThan(TOL);
}

describe("OrtOps vs ReferenceOps", () => {
  for (const [shape, inF, outF] of [
    [[5], 3, 7],
    [[2, 3], 17, 9],
    [[1], 1, 1],
  ] as [number[], number, number][]) {
    it(`linear ${[...shape, inF].join("x")} -> ${outF}, with and without bias`, async () => {
      const x = rand([...shape, inF]),
        w = rand([inF, outF]),
        b = rand([outF]),
        dy = rand([...shape, outF]);
      close(await ort.linearForward(x, w, b), await ref.linearForward(x, w, b), "y (bias)");
      close(await ort.linearForward(x, w), await ref.linearForward(x, w), "y");
      const [o, r] = [await ort.linearBackward(x, w, dy, true), await ref.linearBackward(x, w, dy, true)];
      close(o.dx, r.dx, "dx");
      close(o.dw, r.dw, "dw");
      close(o.db!, r.db!, "db");
      const noBias = await ort.linearBackward(x, w, dy, false);
      expect(noBias.db).toBeUndefined();
      close(noBias.dw, r.dw, "dw (no bias)");
      // each gradient alone, from OrtOps and from the reference, against linearBackward's float64 pair
      close(await ort.linearInputGradient(w, dy), r.dx, "linearInputGradient");
      close(await ort.linearWeightGradient(x, dy), r.dw, "linearWeightGradient");
      close(await ref.linearInputGradient(w, dy), r.dx, "reference linearInputGradient");
      close(await ref.linearWeightGradient(x, dy), r.dw, "reference linearWeightGradient");
    });
  }

  it("linear gradients alone name mismatched shapes", async () => {
    await expect(ort.linearInputGradient(rand([3, 4]), rand([2, 5]))).rejects.toThrow(/w must be \[in, out=5\].*got \[3, 4\]/);
    await expect(ort.linearWeightGradient(rand([3, 4]), rand([2, 5]))).rejects.toThrow(/as many rows/);
    await expect(ref.linearWeightGradient(rand([3, 4]), rand([2, 5]))).rejects.toThrow(/as many rows/);
  });

  for (const shape of [
    [3, 7],
    [2, 3, 33],
  ]) {
    it(`layerNorm ${shape.join("x")}`, async () => {
      const h = shape[shape.length - 1]!;
      const x = rand(shape, 3),
        gamma = rand([h]),
        beta = rand([h]),
        dy = rand(shape);
      const [o, r] = [await ort.layerNormForward(x, gamma, beta, 1e-5), await ref.layerNormForward(x, gamma, beta, 1e-5)];
      close(o.y, r.y, "y");
      close(o.mean, r.mean, "mean");
      close(o.rstd, r.rstd, "rstd");
      const [go, gr] = [await ort.layerNormBackward(x, gamma, o, dy), await ref.layerNormBackward(x, gamma, r, dy)];
      close(go.dx, gr.dx, "dx");
      close(go.dGamma, gr.dGamma, "dGamma");
      close(go.dBeta, gr.dBeta, "dBeta");
    });

    it(`rmsNorm ${shape.join("x")}`, async () => {
      const h = shape[shape.length - 1]!;
      const x = rand(shape, 3),
        gamma = rand([h]),
        dy = rand(shape);
      const [o, r] = [await ort.rmsNormForward(x, gamma, 1e-6), await ref.rmsNormForward(x, gamma, 1e-6)];
      close(o.y, r.y, "y");
      close(o.rstd, r.rstd, "rstd");
      const [go, gr] = [await ort.rmsNormBackward(x, gamma, o.rstd, dy), await ref.rmsNormBackward(x, gamma, r.rstd, dy)];
      close(go.dx, gr.dx, "dx");
      close(go.dGamma, gr.dGamma, "dGamma");
    });
  }

  for (const shape of [[7], [3, 5, 11]]) {
    it(`gelu and swiglu ${shape.join("x")}`, async () => {
      const x = rand(shape, 5),
        up = rand(shape, 2),
        dy = rand(shape);
      close(await ort.geluForward(x), await ref.geluForward(x), "gelu y");
      close(await ort.geluBackward(x, dy), await ref.geluBackward(x, dy), "gelu dx");
      close(await ort.swigluForward(x, up), await ref.swigluForward(x, up), "swiglu y");
      const [o, r] = [await ort.swigluBackward(x, up, dy), await ref.swigluBackward(x, up, dy)];
      close(o.dGate, r.dGate, "dGate");
      close(o.dUp, r.dUp, "dUp");
    });
  }

  for (const [dims, offset, base] of [
    [[2, 5, 3, 8], 0, 10000],
    [[1, 3, 2, 6], 17, 500],
  ] as [number[], number, number][]) {
    it(`rope ${dims.join("x")} offset ${offset} base ${base}`, async () => {
      const x = rand(dims),
        dy = rand(dims);
      close(await ort.ropeForward(x, offset, base), await ref.ropeForward(x, offset, base), "y");
      close(await ort.ropeBackward(dy, offset, base), await ref.ropeBackward(dy, offset, base), "dx");
    });
  }

  it("rope of a sequence slice with its offset equals the slice of the whole (forward and backward)", async () => {
    const x = rand([2, 9, 2, 8], 2);
    const whole = await ort.ropeForward(x, 0);
    const wholeBack = await ort.ropeBackward(x, 0);
    const parts: Tensor<"float32">[] = [];
    for (const [start, length] of [
      [0, 4],
      [4, 3],
      [7, 2],
    ] as [number, number][]) {
      // x[:, start:start+length] (copied to fresh contiguous memory)
      const slice = narrow(x, 1, start, length);
      const y = await ort.ropeForward(slice, start);
      // Same global positions, same tables, same float32 ops: bit-identical, not just close.
      expect(Array.from(y.data), `forward [${start}, ${start + length})`).toEqual(Array.from(narrow(whole, 1, start, length).data));
      const back = await ort.ropeBackward(slice, start);
      expect(Array.from(back.data), `backward [${start}, ${start + length})`).toEqual(Array.from(narrow(wholeBack, 1, start, length).data));
      parts.push(y);
    }
    expect(Array.from(concat(parts, 1).data)).toEqual(Array.from(whole.data));
    close(await ref.ropeForward(narrow(x, 1, 4, 3), 4), narrow(await ref.ropeForward(x, 0), 1, 4, 3), "reference slice");
  });

  it("embedding forward and backward (repeated ids, ids with leading axes)", async () => {
    const table = rand([11, 5]);
    const ids = Tensor.from("int32", [2, 3], [3, 0, 10, 3, 3, 7]);
    const dy = rand([2, 3, 5]);
    close(await ort.embeddingForward(ids, table), await ref.embeddingForward(ids, table), "out");
    close(await ort.embeddingBackward(ids, dy, 11), await ref.embeddingBackward(ids, dy, 11), "dTable");
    // into a gradient that already holds values: added in place, the same object returned
    const before = rand([11, 5], 3);
    const expected = await ref.embeddingBackward(ids, dy, 11);
    for (let i = 0; i < expected.size; i++) expected.data[i] += before.data[i]!;
    const into = new Tensor("float32", [11, 5], before.data.slice());
    expect(await ort.embeddingBackward(ids, dy, 11, into)).toBe(into);
    close(into, expected, "dTable in place");
    const refInto = new Tensor("float32", [11, 5], before.data.slice());
    expect(await ref.embeddingBackward(ids, dy, 11, refInto)).toBe(refInto);
    close(refInto, expected, "reference dTable in place");
    await expect(ort.embeddingBackward(ids, dy, 11, new Tensor("float32", [10, 5]))).rejects.toThrow(/into/);
    await expect(ort.embeddingForward(Tensor.from("int32", [1], [11]), table)).rejects.toThrow(/id 11 at position 0/);
  });

  it("cross-entropy with ignored labels: count excludes them, their gradient rows are zero", async () => {
    const logits = rand([6, 13], 8);
    const labels = Tensor.from("int32", [6], [4, -100, 12, 0, -100, 4]);
    const [o, r] = [await ort.crossEntropyForward(logits, labels), await ref.crossEntropyForward(logits, labels)];
    expect(o.count).toBe(4);
    expect(r.count).toBe(4);
    expect(Math.abs(o.lossSum - r.lossSum) / Math.abs(r.lossSum)).toBeLessThan(TOL);
    // each row's term against the float64 reference's; ignored rows 0
    r.rowLosses.forEach((want, row) => expect(Math.abs(o.rowLosses[row]! - want), `row ${row}`).toBeLessThan(TOL * Math.max(1, want)));
    expect([o.rowLosses[1], o.rowLosses[4]]).toEqual([0, 0]);
    const grad = await ort.crossEntropyBackward(logits, labels, 1 / o.count);
    close(grad, await ref.crossEntropyBackward(logits, labels, 1 / o.count), "dLogits");
    for (const row of [1, 4]) expect(Array.from(grad.data.subarray(row * 13, row * 13 + 13))).toEqual(new Array(13).fill(0));
    const custom = Tensor.from("int32", [6], [4, -1, 12, 0, -1, 4]);
    expect((await ort.crossEntropyForward(logits, custom, -1)).lossSum).toBeCloseTo(o.lossSum, 4);
  });

  it("cross-entropy is stable for large logits", async () => {
    const logits = Tensor.from("float32", [2, 3], [1000, 999, -5, -1000, -1001, -2000]);
    const labels = Tensor.from("int32", [2], [1, 0]);
    const [o, r] = [await ort.crossEntropyForward(logits, labels), await ref.crossEntropyForward(logits, labels)];
    expect(Number.isFinite(o.lossSum)).toBe(true);
    expect(Math.abs(o.lossSum - r.lossSum)).toBeLessThan(1e-4);
    close(await ort.crossEntropyBackward(logits, labels, 2), await ref.crossEntropyBackward(logits, labels, 2), "dLogits");
  });

  it("reuses one session per op and shape, and rejects bad shapes with the values", async () => {
    const ops = createOrtOps(cache);
    const x = rand([4, 6]),
      gamma = rand([6]);
    await ops.rmsNormForward(x, gamma, 1e-6);
    const before = cache.size;
    await ops.rmsNormForward(rand([4, 6]), gamma, 1e-6);
    expect(cache.size).toBe(before);
    await expect(ops.linearForward(x, rand([5, 2]))).rejects.toThrow(/w must be \[in=6, out\].*\[5, 2\]/);
    await expect(ops.ropeForward(rand([1, 2, 1, 5]), 0)).rejects.toThrow(/even headDim/);
  });
});
