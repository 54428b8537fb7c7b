/**
 * The addon's in-place cross-entropy (crossEntropy, and FusedOps'
 * crossEntropyInPlace over it): each row's -log softmax(row)[label], the
 * first index of its maximum, and the gradient written over the logits,
 * against the float64 references of @ulysses/kernels (crossEntropyForward64,
 * crossEntropyBackward64) and a first-maximum scan in TypeScript, on every
 * instruction set this processor runs and 1-3 threads. Vocabularies cover
 * vector tails and one past the kernel's 4096-float partial sums; logits
 * span [-30, 30] so the exponentials cover 26 binades. Skipped, with the
 * reason in the suite's name, only when the native addon is not built.
 */
import { SessionCache } from "@ulysses/kernels";
import { crossEntropyBackward64, crossEntropyForward64, seededRandom } from "@ulysses/kernels/testing";
import { Tensor } from "@ulysses/tensors";
import { afterAll, describe, expect, it } from "vitest";
import { FusedOps } from "./index.js";
import { itOnEveryIsa, nativeBinding, nativeStatus, suiteName } from "./testing-fixtures/native-kernels.js";

const status = nativeStatus;
const suite = suiteName("crossEntropy (native, in place)");
const IGNORE = -100;

function logitsOf(rows: number, vocab: number, random: () => number): Float32Array {
  return Float32Array.from({ length: rows * vocab }, () => (random() * 2 - 1) * 30);
}

/** Labels in [0, vocab), every third row ignored. */
function labelsOf(rows: number, vocab: number, random: () => number): Int32Array {
  return Int32Array.from({ length: rows }, (_, r) => (r % 3 === 2 ? IGNORE : Math.floor(random() * vocab)));
}

/** The first index of each row's largest value (what @ulysses/training's countCorrect takes as the prediction). */
function firstArgmax(logits: Float32Array, rows: number, vocab: number): number[] {
  return Array.from({ length: rows }, (_, r) => {
    let best = 0;
    for (let v = 1; v < vocab; v++) if (logits[r * vocab + v]! > logits[r * vocab + best]!) best = v;
    return best;
  });
}

describe.skipIf(!status.available)(suite, () => {
  const binding = status.available ? nativeBinding() : null!;
  const cache = new SessionCache({ intraOpThreads: 2 });
  afterAll(() => cache.release());

  // [rows, vocab]: one element, vector tails, one past a 4096-float partial sum, a tile's proportions
  const SHAPES: [number, number][] = [
    [1, 1],
    [4, 17],
    [7, 4097],
    [40, 1000],
    [0, 5],
  ];

  itOnEveryIsa("loss, argmax and in-place gradient equal the float64 references", (isa, threads) => {
    const random = seededRandom(31 + threads);
    for (const [rows, vocab] of SHAPES) {
      const logits = logitsOf(rows, vocab, random);
      const labels = labelsOf(rows, vocab, random);
      const tensor = new Tensor("float32", [rows, vocab], Float32Array.from(logits));
      const labelTensor = new Tensor("int32", [rows], labels);
      const forward = crossEntropyForward64(tensor, labelTensor, IGNORE);
      const scale = 0.37;
      const gradient = crossEntropyBackward64(tensor, labelTensor, scale, IGNORE);
      const argmaxRef = firstArgmax(logits, rows, vocab);
      const work = Float32Array.from(logits);
      const rowLoss = new Float32Array(rows);
      const argmax = new Int32Array(rows);
      binding.crossEntropy(work, labels, rowLoss, argmax, rows, vocab, IGNORE, scale, threads, isa);
      for (let r = 0; r < rows; r++) {
        const where = `[${rows}, ${vocab}] row ${r}`;
        if (labels[r] === IGNORE) {
          expect(rowLoss[r], where).toBe(0);
          expect(argmax[r], where).toBe(-1);
        } else {
          // float32 logits and logsumexp: |loss - ref| within a few ulps of the row's largest magnitude (30)
          expect(Math.abs(rowLoss[r]! - forward.rowLosses[r]!), where).toBeLessThan(3e-5 * 30);
          expect(argmax[r], where).toBe(argmaxRef[r]);
        }
        for (let v = 0; v < vocab; v++) {
          const i = r * vocab + v;
          expect(Math.abs(work[i]! - gradient.data[i]!), `${where} column ${v}`).toBeLessThan(1e-6 * scale + 2e-6 * Math.abs(gradient.data[i]!));
        }
      }
    }
  });

  it("without gradScale (null) leaves the logits as they were", () => {
    const random = seededRandom(3);
    const logits = logitsOf(5, 300, random);
    const work = Float32Array.from(logits);
    binding.crossEntropy(work, labelsOf(5, 300, random), new Float32Array(5), new Int32Array(5), 5, 300, IGNORE, null, 2);
    expect(Buffer.from(work.buffer).equals(Buffer.from(logits.buffer))).toBe(true);
  });

  it("takes the first of tied maxima, as countCorrect does", () => {
    const logits = Float32Array.from([1, 5, 5, 2, 7, 7, 7, 0]);
    const argmax = new Int32Array(2);
    binding.crossEntropy(logits, Int32Array.from([2, 0]), new Float32Array(2), argmax, 2, 4, IGNORE, null, 1);
    expect([...argmax]).toEqual([1, 0]);
  });

  it("gives the same bits for every thread count (each row in one order)", () => {
    const random = seededRandom(5);
    const [rows, vocab] = [50, 5000];
    const logits = logitsOf(rows, vocab, random);
    const labels = labelsOf(rows, vocab, random);
    const results = [1, 2, 3, 7].map((threads) => {
      const work = Float32Array.from(logits);
      const loss = new Float32Array(rows);
      binding.crossEntropy(work, labels, loss, new Int32Array(rows), rows, vocab, IGNORE, 0.5, threads);
      return Buffer.concat([Buffer.from(work.buffer), Buffer.from(loss.buffer)]);
    });
    for (const r of results.slice(1)) expect(r.equals(results[0]!)).toBe(true);
  });

  it("refuses a label out of range, arrays of the wrong size or type, overlaps and a non-finite scale, naming each", () => {
    const logits = new Float32Array(8);
    const call = (over: Partial<{ logits: Float32Array; labels: Int32Array; loss: Float32Array; argmax: Int32Array; scale: number | null }>) => () =>
      binding.crossEntropy(
        over.logits ?? logits,
        over.labels ?? Int32Array.from([0, 3]),
        over.loss ?? new Float32Array(2),
        over.argmax ?? new Int32Array(2),
        2,
        4,
        IGNORE,
        over.scale === undefined ? 1 : over.scale,
        1,
      );
    expect(call({ labels: Int32Array.from([0, 4]) })).toThrow(/labels\[1\] = 4 is outside \[0, 4\) and is not ignoreIndex -100/);
    expect(call({ labels: Int32Array.from([-1, 0]) })).toThrow(/labels\[0\] = -1 is outside/);
    expect(call({ logits: new Float32Array(7) })).toThrow(/logits has 7 elements, rows \* vocab = 8/);
    expect(call({ labels: new Float32Array(2) as unknown as Int32Array })).toThrow(/labels must be an Int32Array, got a Float32Array/);
    expect(call({ loss: logits.subarray(0, 2) })).toThrow(/logits overlaps rowLoss/);
    expect(call({ scale: Number.NaN })).toThrow(/gradScale must be a finite number/);
  });

  it("FusedOps.crossEntropyInPlace: the loss sum, count and correct rows, and the gradient over the logits", async () => {
    const ops = new FusedOps(cache);
    const random = seededRandom(11);
    const [rows, vocab] = [9, 700];
    const logits = logitsOf(rows, vocab, random);
    const labels = new Tensor("int32", [rows], labelsOf(rows, vocab, random));
    // two rows predicted right
    const predicted = firstArgmax(logits, rows, vocab);
    labels.data[0] = predicted[0]!;
    labels.data[4] = predicted[4]!;
    const tensor = new Tensor("float32", [rows, vocab], Float32Array.from(logits));
    const forward = crossEntropyForward64(tensor, labels, IGNORE);
    const gradient = crossEntropyBackward64(tensor, labels, 0.25, IGNORE);
    const result = await ops.crossEntropyInPlace(tensor, labels, 0.25, IGNORE);
    expect(result.count).toBe(forward.count);
    expect(Math.abs(result.lossSum - forward.lossSum)).toBeLessThan(1e-4 * forward.count * 30);
    const expectedCorrect = predicted.filter((p, r) => labels.data[r] !== IGNORE && p === labels.data[r]).length;
    expect(expectedCorrect).toBeGreaterThanOrEqual(2);
    expect(result.correct).toBe(expectedCorrect);
    for (let i = 0; i < tensor.size; i++) expect(Math.abs(tensor.data[i]! - gradient.data[i]!)).toBeLessThan(1e-6);
    await expect(ops.crossEntropyInPlace(new Tensor("float32", [rows * vocab]), labels, null)).rejects.toThrow(/logits must be \[rows, vocab\]/);
  });
});
