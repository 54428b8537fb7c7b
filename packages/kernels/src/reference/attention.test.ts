import { describe, expect, it } from "vitest";
import { Tensor } from "@ulysses/tensors";
import type { AttentionDims } from "../attention/shapes.js";
import { ReferenceAttention, referenceBackward64, referenceForward64 } from "./attention.js";

/** Deterministic uniform values in [-1, 1) (a small LCG; tests need no seeding library). */
function randoms(n: number, seed: number): Float64Array {
  let state = seed >>> 0;
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    out[i] = state / 2 ** 31 - 1;
  }
  return out;
}

function dimsOf(
  batch: number,
  seqQ: number,
  seqK: number,
  heads: number,
  kvHeads: number,
  headDim: number,
  causal: boolean,
  scale = 1 / Math.sqrt(headDim),
): AttentionDims {
  return { batch, seqQ, seqK, heads, kvHeads, headDim, group: heads / kvHeads, scale, causal, offset: seqK - seqQ };
}

/**
 * An independent dense definition: the full score matrix with a -Infinity
 * mask, softmax per row, then P V. Written separately from the reference.
 */
function denseForward(q: Float64Array, k: Float64Array, v: Float64Array, t: AttentionDims): { out: Float64Array; lse: Float64Array } {
  const out = new Float64Array(t.batch * t.seqQ * t.heads * t.headDim);
  const lse = new Float64Array(t.batch * t.heads * t.seqQ);
  const at = (x: Float64Array, b: number, s: number, len: number, h: number, hn: number, e: number) => x[((b * len + s) * hn + h) * t.headDim + e]!;
  for (let b = 0; b < t.batch; b++)
    for (let h = 0; h < t.heads; h++) {
      const g = Math.floor((h * t.kvHeads) / t.heads);
      const scores: number[][] = [];
      for (let i = 0; i < t.seqQ; i++) {
        scores.push([]);
        for (let j = 0; j < t.seqK; j++) {
          let s = 0;
          for (let e = 0; e < t.headDim; e++) s += at(q, b, i, t.seqQ, h, t.heads, e) * at(k, b, j, t.seqK, g, t.kvHeads, e);
          const masked = t.causal && j > i + t.seqK - t.seqQ;
          scores[i]!.push(masked ? -Infinity : s * t.scale);
        }
      }
      for (let i = 0; i < t.seqQ; i++) {
        const row = scores[i]!;
        const m = Math.max(...row);
        const l = m === -Infinity ? -Infinity : m + Math.log(row.reduce((a, s) => a + Math.exp(s - m), 0));
        lse[(b * t.heads + h) * t.seqQ + i] = l;
        for (let j = 0; j < t.seqK; j++) {
          const pij = l === -Infinity ? 0 : Math.exp(row[j]! - l);
          for (let e = 0; e < t.headDim; e++) out[((b * t.seqQ + i) * t.heads + h) * t.headDim + e]! += pij * at(v, b, j, t.seqK, g, t.kvHeads, e);
        }
      }
    }
  return { out, lse };
}

function maxAbsDiff(a: Float64Array, b: Float64Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

const cases: [string, AttentionDims][] = [
  ["non-causal MHA", dimsOf(1, 6, 6, 2, 2, 4, false)],
  ["causal MHA", dimsOf(1, 7, 7, 2, 2, 3, true)],
  ["causal GQA 4:2, seqQ < seqK", dimsOf(2, 5, 9, 4, 2, 3, true)],
  ["non-causal GQA 4:1, odd lengths", dimsOf(1, 7, 5, 4, 1, 5, false)],
  ["causal seqQ > seqK (rows without keys), custom scale", dimsOf(1, 9, 5, 2, 1, 4, true, 0.7)],
];

describe("reference attention (float64)", () => {
  for (const [name, t] of cases) {
    const q = randoms(t.batch * t.seqQ * t.heads * t.headDim, 1);
    const k = randoms(t.batch * t.seqK * t.kvHeads * t.headDim, 2).map((x) => 2 * x);
    const v = randoms(t.batch * t.seqK * t.kvHeads * t.headDim, 3);
    const w = randoms(t.batch * t.seqQ * t.heads * t.headDim, 4);

    it(`forward matches a dense masked softmax: ${name}`, () => {
      const r = referenceForward64(q, k, v, t);
      const dense = denseForward(q, k, v, t);
      expect(maxAbsDiff(r.out, dense.out)).toBeLessThan(1e-12);
      for (let i = 0; i < r.logSumExp.length; i++) {
        if (dense.lse[i] === -Infinity) expect(r.logSumExp[i]).toBe(-Infinity);
        else expect(Math.abs(r.logSumExp[i]! - dense.lse[i]!)).toBeLessThan(1e-12);
      }
    });

    it(`backward matches central finite differences: ${name}`, () => {
      const grads = referenceBackward64(q, k, v, w, t);
      const loss = (qq: Float64Array, kk: Float64Array, vv: Float64Array) => referenceForward64(qq, kk, vv, t).out.reduce((a, o, i) => a + o * w[i]!, 0);
      const step = 1e-6;
      let worst = 0;
      let largest = 0;
      for (const [which, analytic] of [
        [0, grads.dq],
        [1, grads.dk],
        [2, grads.dv],
      ] as const) {
        const inputs = [q, k, v].map((x) => x.slice());
        const x = inputs[which]!;
        for (let i = 0; i < x.length; i++) {
          const keep = x[i]!;
          x[i] = keep + step;
          const up = loss(inputs[0]!, inputs[1]!, inputs[2]!);
          x[i] = keep - step;
          const down = loss(inputs[0]!, inputs[1]!, inputs[2]!);
          x[i] = keep;
          const numeric = (up - down) / (2 * step);
          worst = Math.max(worst, Math.abs(numeric - analytic[i]!));
          largest = Math.max(largest, Math.abs(analytic[i]!));
        }
      }
      expect(largest).toBeGreaterThan(0.05);
      expect(worst).toBeLessThan(1e-8);
    });
  }

  it("rows without keys have zero output and zero gradients", () => {
    const t = dimsOf(1, 6, 3, 1, 1, 2, true);
    const q = randoms(12, 5);
    const k = randoms(6, 6);
    const v = randoms(6, 7);
    const r = referenceForward64(q, k, v, t);
    // Queries 0..2 attend no key (j <= i - 3).
    expect(Array.from(r.out.subarray(0, 6))).toEqual([0, 0, 0, 0, 0, 0]);
    expect(Array.from(r.logSumExp.subarray(0, 3))).toEqual([-Infinity, -Infinity, -Infinity]);
    const g = referenceBackward64(q, k, v, randoms(12, 8), t);
    expect(Array.from(g.dq.subarray(0, 6))).toEqual([0, 0, 0, 0, 0, 0]);
    // Query 3 attends key 0 only: its output is v_0.
    expect(r.out[6]).toBeCloseTo(v[0]!, 14);
    expect(r.out[7]).toBeCloseTo(v[1]!, 14);
  });
});

describe("ReferenceAttention (LocalAttention)", () => {
  it("returns float32 tensors of the contract's shapes and validates inputs", async () => {
    const attention = new ReferenceAttention();
    const q = Tensor.from("float32", [2, 3, 4, 2], randoms(48, 9));
    const k = Tensor.from("float32", [2, 5, 2, 2], randoms(40, 10));
    const v = Tensor.from("float32", [2, 5, 2, 2], randoms(40, 11));
    const { out, logSumExp } = await attention.forward(q, k, v, { causal: true });
    expect(out.shape).toEqual([2, 3, 4, 2]);
    expect(logSumExp.shape).toEqual([2, 4, 3]);
    const grads = await attention.backward(q, k, v, out, out, logSumExp, { causal: true });
    expect(grads.dq.shape).toEqual([2, 3, 4, 2]);
    expect(grads.dk.shape).toEqual([2, 5, 2, 2]);
    expect(grads.dv.dtype).toBe("float32");
    const badK = Tensor.from("float32", [2, 5, 3, 2], randoms(60, 12));
    await expect(attention.forward(q, badK, badK, { causal: false })).rejects.toThrow(/heads \(4\) must be a multiple of kvHeads \(3\)/);
    await expect(attention.backward(q, k, v, out, out, out, { causal: false })).rejects.toThrow(/logSumExp must be float32 \[2, 4, 3\]/);
  });
});
