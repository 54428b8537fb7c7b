/**
 * Document masking in the float64 reference, against two independent
 * definitions: every document run on its own through the same reference
 * without documents (results placed back: out, logSumExp and all
 * gradients), and central finite differences of the masked forward.
 */
import { describe, expect, it } from "vitest";
import type { AttentionDims } from "../attention/shapes.js";
import type { AttentionDocuments } from "../attention/types.js";
import { referenceBackward64, referenceForward64 } from "./attention.js";
import { seededRandom } from "./testing.js";

function randoms(n: number, random: () => number): Float64Array {
  return Float64Array.from({ length: n }, () => 2 * random() - 1);
}

/** Document ids of packed rows: lengths[b] are row b's documents in order (ids 0, 1, ...). */
function packIds(lengths: number[][]): Int32Array {
  return Int32Array.from(lengths.flatMap((row) => row.flatMap((length, id) => new Array<number>(length).fill(id))));
}

interface Case {
  name: string;
  heads: number;
  kvHeads: number;
  headDim: number;
  causal: boolean;
  /** Documents of every row, as lengths (the rows' sums must agree). */
  keys: number[][];
  /** Queries: the last seqQ positions of the keys (all of them when absent). */
  seqQ?: number;
}

const cases: Case[] = [
  {
    name: "causal MHA, batch 2, lengths 1, 3, 7, ...",
    heads: 2,
    kvHeads: 2,
    headDim: 4,
    causal: true,
    keys: [
      [1, 3, 7, 2, 5],
      [6, 1, 1, 10],
    ],
  },
  {
    name: "non-causal MHA, batch 2",
    heads: 2,
    kvHeads: 2,
    headDim: 4,
    causal: false,
    keys: [
      [1, 3, 7, 2, 5],
      [6, 1, 1, 10],
    ],
  },
  { name: "causal GQA 4:2, one document per row in row 1", heads: 4, kvHeads: 2, headDim: 3, causal: true, keys: [[3, 1, 7, 4], [15]] },
  {
    name: "non-causal GQA 4:1",
    heads: 4,
    kvHeads: 1,
    headDim: 5,
    causal: false,
    keys: [
      [7, 1, 3],
      [2, 2, 2, 5],
    ],
  },
  {
    name: "causal GQA 4:2, queries the last 9 of 18 keys (all-gather-KV)",
    heads: 4,
    kvHeads: 2,
    headDim: 3,
    causal: true,
    keys: [
      [5, 7, 6],
      [1, 3, 14],
    ],
    seqQ: 9,
  },
];

/** Rows `positions` of x [batch, seq, width] in row b, as [1, positions.length, width]. */
function take(x: Float64Array, seq: number, width: number, b: number, positions: number[]): Float64Array {
  const out = new Float64Array(positions.length * width);
  positions.forEach((p, n) => out.set(x.subarray((b * seq + p) * width, (b * seq + p + 1) * width), n * width));
  return out;
}

/** The inverse of take: writes sub [1, positions.length, width] into x at row b. */
function place(x: Float64Array, seq: number, width: number, b: number, positions: number[], sub: Float64Array): void {
  positions.forEach((p, n) => x.set(sub.subarray(n * width, (n + 1) * width), (b * seq + p) * width));
}

function dimsOf(c: Case, batch: number, seqQ: number, seqK: number, documents?: AttentionDocuments): AttentionDims {
  const { heads, kvHeads, headDim, causal } = c;
  return { batch, seqQ, seqK, heads, kvHeads, headDim, group: heads / kvHeads, scale: 1 / Math.sqrt(headDim), causal, offset: seqK - seqQ, documents };
}

function maxAbsDiff(a: Float64Array, b: Float64Array): number {
  expect(a.length).toBe(b.length);
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    if (a[i] === b[i]) continue; // equal infinities too
    m = Math.max(m, Math.abs(a[i]! - b[i]!));
  }
  return m;
}

function setup(c: Case, seed: number) {
  const batch = c.keys.length;
  const seqK = c.keys[0]!.reduce((a, n) => a + n, 0);
  const seqQ = c.seqQ ?? seqK;
  const key = packIds(c.keys);
  const query = new Int32Array(batch * seqQ);
  for (let b = 0; b < batch; b++) query.set(key.subarray(b * seqK + seqK - seqQ, (b + 1) * seqK), b * seqQ);
  const dims = dimsOf(c, batch, seqQ, seqK, { query, key });
  const random = seededRandom(seed);
  const q = randoms(batch * seqQ * c.heads * c.headDim, random);
  const k = randoms(batch * seqK * c.kvHeads * c.headDim, random).map((x) => 2 * x);
  const v = randoms(batch * seqK * c.kvHeads * c.headDim, random);
  const dOut = randoms(batch * seqQ * c.heads * c.headDim, random);
  return { dims, q, k, v, dOut };
}

describe("reference attention with documents", () => {
  for (const c of cases) {
    it(`equals each document run alone, placed back (forward, logSumExp, gradients): ${c.name}`, () => {
      const { dims, q, k, v, dOut } = setup(c, 1);
      const { batch, seqQ, seqK, heads, kvHeads, headDim: d } = dims;
      const masked = referenceForward64(q, k, v, dims);
      const grads = referenceBackward64(q, k, v, dOut, dims);
      const want = {
        out: new Float64Array(masked.out.length),
        lse: new Float64Array(masked.logSumExp.length).fill(Number.NaN),
        dq: new Float64Array(q.length),
        dk: new Float64Array(k.length),
        dv: new Float64Array(v.length),
      };
      let documents = 0;
      for (let b = 0; b < batch; b++) {
        const ids = new Set(dims.documents!.key.subarray(b * seqK, (b + 1) * seqK));
        for (const id of ids) {
          const queries = [...Array(seqQ).keys()].filter((i) => dims.documents!.query[b * seqQ + i] === id);
          const keys = [...Array(seqK).keys()].filter((j) => dims.documents!.key[b * seqK + j] === id);
          if (queries.length === 0) continue; // its keys' gradients stay 0
          documents++;
          const alone = dimsOf(c, 1, queries.length, keys.length);
          const [sq, sk, sv, sd] = [
            take(q, seqQ, heads * d, b, queries),
            take(k, seqK, kvHeads * d, b, keys),
            take(v, seqK, kvHeads * d, b, keys),
            take(dOut, seqQ, heads * d, b, queries),
          ];
          const forward = referenceForward64(sq, sk, sv, alone);
          const backward = referenceBackward64(sq, sk, sv, sd, alone);
          place(want.out, seqQ, heads * d, b, queries, forward.out);
          place(want.dq, seqQ, heads * d, b, queries, backward.dq);
          place(want.dk, seqK, kvHeads * d, b, keys, backward.dk);
          place(want.dv, seqK, kvHeads * d, b, keys, backward.dv);
          // logSumExp [batch, heads, seqQ] <- [1, heads, queries]
          for (let h = 0; h < heads; h++) queries.forEach((i, n) => (want.lse[(b * heads + h) * seqQ + i] = forward.logSumExp[h * queries.length + n]!));
        }
      }
      expect(documents).toBeGreaterThan(batch);
      expect(want.lse.some(Number.isNaN)).toBe(false);
      expect(maxAbsDiff(masked.out, want.out)).toBeLessThan(1e-13);
      expect(maxAbsDiff(masked.logSumExp, want.lse)).toBeLessThan(1e-13);
      for (const name of ["dq", "dk", "dv"] as const) expect(maxAbsDiff(grads[name], want[name]), name).toBeLessThan(1e-13);
      // The documents matter: without them the result differs.
      expect(maxAbsDiff(referenceForward64(q, k, v, { ...dims, documents: undefined }).out, want.out)).toBeGreaterThan(1e-3);
    });
  }

  for (const c of [cases[0]!, cases[3]!]) {
    it(`backward matches central finite differences of the masked forward: ${c.name}`, () => {
      const small: Case = {
        ...c,
        keys: [
          [1, 3, 7],
          [2, 3, 6],
        ],
      };
      const { dims, q, k, v, dOut } = setup(small, 2);
      expect(dims.seqK).toBe(11);
      const grads = referenceBackward64(q, k, v, dOut, dims);
      const loss = (inputs: Float64Array[]) => referenceForward64(inputs[0]!, inputs[1]!, inputs[2]!, dims).out.reduce((a, o, i) => a + o * dOut[i]!, 0);
      const step = 1e-6;
      let worst = 0;
      let largest = 0;
      for (const [which, analytic] of [grads.dq, grads.dk, grads.dv].entries()) {
        const inputs = [q, k, v].map((x) => x.slice());
        const x = inputs[which]!;
        for (let i = 0; i < x.length; i++) {
          const keep = x[i]!;
          x[i] = keep + step;
          const up = loss(inputs);
          x[i] = keep - step;
          const down = loss(inputs);
          x[i] = keep;
          worst = Math.max(worst, Math.abs((up - down) / (2 * step) - analytic[i]!));
          largest = Math.max(largest, Math.abs(analytic[i]!));
        }
      }
      expect(largest).toBeGreaterThan(0.05);
      expect(worst).toBeLessThan(1e-8);
    });
  }

  it("a query whose document has no keys attends nothing: out 0, logSumExp -Infinity, zero gradients", () => {
    const c: Case = { name: "", heads: 1, kvHeads: 1, headDim: 2, causal: false, keys: [[3, 3]] };
    const dims = dimsOf(c, 1, 4, 6, { query: Int32Array.from([0, 1, 1, 2]), key: Int32Array.from([0, 0, 0, 2, 2, 2]) });
    const random = seededRandom(3);
    const [q, k, v, dOut] = [8, 12, 12, 8].map((n) => randoms(n, random)) as [Float64Array, Float64Array, Float64Array, Float64Array];
    const r = referenceForward64(q, k, v, dims);
    expect(Array.from(r.logSumExp.subarray(1, 3))).toEqual([-Infinity, -Infinity]);
    expect(Array.from(r.out.subarray(2, 6))).toEqual([0, 0, 0, 0]);
    expect(Number.isFinite(r.logSumExp[0]!) && Number.isFinite(r.logSumExp[3]!)).toBe(true);
    const g = referenceBackward64(q, k, v, dOut, dims);
    expect(Array.from(g.dq.subarray(2, 6))).toEqual([0, 0, 0, 0]);
  });
});
