/**
 * OrtAttention with packed documents against the float64 reference
 * (relative Frobenius error <= 1e-5 on out, logSumExp, dq, dk, dv): packings
 * whose boundaries fall inside and on query blocks and key tiles, GQA, batch
 * rows packed differently, the shapes the sharded wrappers use (queries the
 * last or a middle part of the keys, `documents.query` given explicitly), and
 * queries whose document has no keys.
 */
import { afterAll, describe, expect, it } from "vitest";
import type { Tensor } from "@ulysses/tensors";
import { ReferenceAttention } from "../reference/attention.js";
import { randomTensor, seededRandom } from "../reference/testing.js";
import { SessionCache } from "../runtime/session-cache.js";
import { OrtAttention } from "./ort-attention.js";
import type { AttentionDocuments } from "./types.js";

/** Relative error in the Frobenius norm: ||a - b|| / ||b||; -Infinity entries must match exactly and count as 0. */
function relativeError(a: Tensor<"float32">, b: Tensor<"float32">): number {
  expect(a.shape).toEqual(b.shape);
  let diff = 0;
  let norm = 0;
  for (let i = 0; i < a.size; i++) {
    const [x, y] = [a.data[i]!, b.data[i]!];
    if (!Number.isFinite(y)) {
      expect(x).toBe(y);
      continue;
    }
    diff += (x - y) ** 2;
    norm += y ** 2;
  }
  return Math.sqrt(diff) / Math.sqrt(norm);
}

/** Ids of packed rows: lengths[b] are row b's documents in order (ids 0, 1, ...). */
function packIds(lengths: number[][]): Int32Array {
  return Int32Array.from(lengths.flatMap((row) => row.flatMap((length, id) => new Array<number>(length).fill(id))));
}

interface Case {
  name: string;
  heads: number;
  kvHeads: number;
  headDim: number;
  causal: boolean;
  /** Key documents per row, as lengths. */
  keys: number[][];
  /** Queries are keys [from, from + seqQ) of every row (default: all keys). */
  from?: number;
  seqQ?: number;
  /** Explicit query ids (default: the keys' ids at the query positions). */
  query?: number[][];
  /** Rows per run and keys per backward tile (default 32 and 24); "default": block-sizes.ts. */
  blockRows?: number | "default";
}

const cases: Case[] = [
  {
    name: "causal MHA, batch 2 packed differently",
    heads: 2,
    kvHeads: 2,
    headDim: 16,
    causal: true,
    keys: [
      [1, 3, 7, 40, 2, 27],
      [64, 1, 15],
    ],
  },
  {
    name: "non-causal MHA, batch 2 packed differently",
    heads: 2,
    kvHeads: 2,
    headDim: 16,
    causal: false,
    keys: [
      [1, 3, 7, 40, 2, 27],
      [64, 1, 15],
    ],
  },
  { name: "causal GQA 4:2, documents on block boundaries", heads: 4, kvHeads: 2, headDim: 8, causal: true, keys: [[16, 16, 32, 16]] },
  {
    name: "non-causal GQA 4:1, long and short documents",
    heads: 4,
    kvHeads: 1,
    headDim: 8,
    causal: false,
    keys: [
      [50, 1, 1, 1, 30],
      [3, 80],
    ],
  },
  { name: "causal GQA 4:1, one document per row", heads: 4, kvHeads: 1, headDim: 8, causal: true, keys: [[45], [45]] },
  {
    name: "causal all-gather-KV: queries the last 37 of 100 keys",
    heads: 4,
    kvHeads: 2,
    headDim: 8,
    causal: true,
    keys: [
      [30, 25, 5, 40],
      [70, 2, 28],
    ],
    from: 63,
    seqQ: 37,
  },
  {
    name: "non-causal: queries a middle part (keys 35..65 of 100)",
    heads: 2,
    kvHeads: 1,
    headDim: 16,
    causal: false,
    keys: [
      [30, 25, 5, 40],
      [70, 2, 28],
    ],
    from: 35,
    seqQ: 30,
  },
  {
    name: "non-causal: queries of documents without keys attend nothing",
    heads: 2,
    kvHeads: 2,
    headDim: 16,
    causal: false,
    keys: [[20, 0, 20, 10, 0, 10]],
    query: [[10, 10, 10, 0, 20, 10]],
  },
  { name: "causal, 8 documents of 128, default blocks", heads: 2, kvHeads: 2, headDim: 32, causal: true, keys: [new Array(8).fill(128)], blockRows: "default" },
  { name: "causal, packed 700, default blocks", heads: 2, kvHeads: 1, headDim: 64, causal: true, keys: [[300, 1, 99, 290, 10]], blockRows: "default" },
];

function documentsOf(c: Case): { documents: AttentionDocuments; seqQ: number; seqK: number } {
  const seqK = c.keys[0]!.reduce((a, n) => a + n, 0);
  const key = packIds(c.keys);
  if (c.query) return { documents: { query: packIds(c.query), key }, seqQ: c.query[0]!.reduce((a, n) => a + n, 0), seqK };
  const from = c.from ?? 0;
  const seqQ = c.seqQ ?? seqK;
  const query = new Int32Array(c.keys.length * seqQ);
  for (let b = 0; b < c.keys.length; b++) query.set(key.subarray(b * seqK + from, b * seqK + from + seqQ), b * seqQ);
  return { documents: { query, key }, seqQ, seqK };
}

const TOLERANCE = 1e-5;

describe("OrtAttention with documents matches ReferenceAttention (relative Frobenius error <= 1e-5)", () => {
  const cache = new SessionCache({ intraOpThreads: 1 });
  const reference = new ReferenceAttention();
  afterAll(() => cache.release());

  for (const c of cases) {
    it(c.name, async () => {
      const { documents, seqQ, seqK } = documentsOf(c);
      const batch = c.keys.length;
      const attention = c.blockRows === "default" ? new OrtAttention({ cache }) : new OrtAttention({ cache, blockRows: c.blockRows ?? 32, tileKeys: 24 });
      const random = seededRandom(c.name.length);
      const q = randomTensor([batch, seqQ, c.heads, c.headDim], random, 1.5);
      const k = randomTensor([batch, seqK, c.kvHeads, c.headDim], random, 1.5);
      const v = randomTensor([batch, seqK, c.kvHeads, c.headDim], random);
      const dOut = randomTensor([batch, seqQ, c.heads, c.headDim], random);
      const options = { causal: c.causal, documents };
      const mine = await attention.forward(q, k, v, options);
      const want = await reference.forward(q, k, v, options);
      expect(relativeError(mine.out, want.out)).toBeLessThanOrEqual(TOLERANCE);
      expect(relativeError(mine.logSumExp, want.logSumExp)).toBeLessThanOrEqual(TOLERANCE);
      const grads = await attention.backward(q, k, v, mine.out, dOut, mine.logSumExp, options);
      const wantGrads = await reference.backward(q, k, v, want.out, dOut, want.logSumExp, options);
      for (const name of ["dq", "dk", "dv"] as const) expect(relativeError(grads[name], wantGrads[name]), name).toBeLessThanOrEqual(TOLERANCE);
      // The documents change the result: the plain mask gives another one.
      const plain = await reference.forward(q, k, v, { causal: c.causal });
      if (c.keys.some((row) => row.length > 1)) expect(relativeError(plain.out, want.out)).toBeGreaterThan(1e-2);
    });
  }
});
