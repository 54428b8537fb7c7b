/**
 * Packed documents: attentionDims's checks (messages name the call, the
 * array, the row, the index and the value), and the key ranges, spans and
 * tile visibility derived from them, against the contract's definition
 * checked key by key.
 */
import { describe, expect, it } from "vitest";
import { Tensor } from "@ulysses/tensors";
import { KernelError } from "../errors.js";
import { seededRandom } from "../reference/testing.js";
import { documentRanges, keySpan, tileVisibility } from "./documents.js";
import { attentionDims, type AttentionDims } from "./shapes.js";
import type { AttentionDocuments } from "./types.js";

class OtherError extends Error {}

const q = new Tensor("float32", [2, 3, 4, 8]);
const k = new Tensor("float32", [2, 5, 2, 8]);
const good: AttentionDocuments = { query: Int32Array.from([0, 1, 1, 4, 4, 5]), key: Int32Array.from([0, 0, 1, 1, 1, 3, 4, 4, 5, 5]) };

describe("attentionDims checks documents", () => {
  it("accepts valid documents and carries them in the sizes", () => {
    expect(attentionDims(q, k, k, { causal: true, documents: good }, "Test.forward").documents).toBe(good);
    expect(attentionDims(q, k, k, { causal: true }, "Test.forward").documents).toBeUndefined();
  });

  it("names the call, the array, the row, the index and the value", () => {
    const cases: [unknown, RegExp][] = [
      [{ query: good.query.subarray(1), key: good.key }, /^Test\.forward: documents\.query must have batch \* seqQ = 2 \* 3 = 6 ids, got 5$/],
      [{ query: good.query, key: new Int32Array(11) }, /^Test\.forward: documents\.key must have batch \* seqK = 2 \* 5 = 10 ids, got 11$/],
      [
        { query: Int32Array.from([0, 1, 1, 4, 3, 5]), key: good.key },
        /^Test\.forward: documents\.query decreases in row 1 at index 1: 3 after 4 \(document ids must not decrease along a row\)$/,
      ],
      [{ query: good.query, key: Int32Array.from([0, 0, 1, 1, 1, 3, 4, 4, 5, 2]) }, /documents\.key decreases in row 1 at index 4: 2 after 5/],
      [
        { query: Float32Array.from(good.query), key: good.key },
        /documents\.query must be an Int32Array of batch \* seqQ = 2 \* 3 = 6 ids, got a Float32Array of 6/,
      ],
      [{ query: good.query, key: Array.from(good.key) }, /documents\.key must be an Int32Array of batch \* seqK = 2 \* 5 = 10 ids, got an Array of 10/],
      [{ query: good.query }, /documents\.key must be an Int32Array .*, got undefined/],
      [Int32Array.from([0]), /documents\.query must be an Int32Array .*, got undefined/],
      [null, /^Test\.forward: documents must be \{ query, key \} \(Int32Arrays\), got null$/],
    ];
    for (const [documents, message] of cases) {
      const call = () => attentionDims(q, k, k, { causal: true, documents: documents as AttentionDocuments }, "Test.forward");
      expect(call).toThrow(KernelError);
      expect(call).toThrow(message);
    }
    const other = (message: string) => new OtherError(message);
    expect(() => attentionDims(q, k, k, { causal: false, documents: { query: good.query, key: good.query } }, "Other.forward", other)).toThrow(OtherError);
  });
});

/** The definition: query i of row b attends key j (causal limit, same document). */
function attends(dims: AttentionDims, b: number, i: number, j: number): boolean {
  if (dims.causal && j > i + dims.offset) return false;
  const documents = dims.documents;
  return documents === undefined || documents.query[b * dims.seqQ + i] === documents.key[b * dims.seqK + j];
}

/** Random non-decreasing ids of `length`, with runs of 1 to 6, sometimes skipping ids. */
function randomIds(length: number, random: () => number): Int32Array {
  const ids = new Int32Array(length);
  let id = Math.floor(random() * 3);
  for (let t = 0; t < length; ) {
    const run = 1 + Math.floor(random() * 6);
    for (let n = 0; n < run && t < length; n++) ids[t++] = id;
    id += 1 + (random() < 0.2 ? 1 : 0);
  }
  return ids;
}

function randomDims(random: () => number, causal: boolean): AttentionDims {
  const batch = 1 + Math.floor(random() * 2);
  const seqK = 1 + Math.floor(random() * 30);
  const seqQ = 1 + Math.floor(random() * seqK);
  const key = new Int32Array(batch * seqK);
  const query = new Int32Array(batch * seqQ);
  for (let b = 0; b < batch; b++) {
    const row = randomIds(seqK, random);
    key.set(row, b * seqK);
    // Queries: a window of the keys' ids (the last seqQ when causal, anywhere otherwise), or unrelated ids.
    const from = causal ? seqK - seqQ : Math.floor(random() * (seqK - seqQ + 1));
    query.set(random() < 0.8 ? row.subarray(from, from + seqQ) : randomIds(seqQ, random), b * seqQ);
  }
  return { batch, seqQ, seqK, heads: 1, kvHeads: 1, headDim: 1, group: 1, scale: 1, causal, offset: seqK - seqQ, documents: { query, key } };
}

describe("documentRanges, keySpan, tileVisibility", () => {
  it("give exactly the keys the definition attends (random packings, causal and not)", () => {
    const random = seededRandom(7);
    let empty = 0;
    let wrong = 0;
    for (let trial = 0; trial < 300; trial++) {
      const dims = randomDims(random, trial % 2 === 0);
      const ranges = documentRanges(trial % 7 === 0 ? undefined : dims.documents, dims);
      const definition = trial % 7 === 0 ? { ...dims, documents: undefined } : dims;
      for (let b = 0; b < dims.batch; b++) {
        for (let i = 0; i < dims.seqQ; i++) {
          const [start, end] = [ranges.start[b * dims.seqQ + i]!, ranges.end[b * dims.seqQ + i]!];
          if (start > end) wrong++;
          if (start === end) empty++;
          for (let j = 0; j < dims.seqK; j++) if ((j >= start && j < end) !== attends(definition, b, i, j)) wrong++;
        }
        // A random query tile and key tile against the definition.
        const i0 = Math.floor(random() * dims.seqQ);
        const i1 = i0 + 1 + Math.floor(random() * (dims.seqQ - i0));
        const j0 = Math.floor(random() * dims.seqK);
        const j1 = j0 + 1 + Math.floor(random() * (dims.seqK - j0));
        const pairs: boolean[] = [];
        for (let i = i0; i < i1; i++) for (let j = j0; j < j1; j++) pairs.push(attends(definition, b, i, j));
        const want = pairs.every(Boolean) ? "all" : pairs.some(Boolean) ? "some" : "none";
        expect(tileVisibility(ranges, b, i0, i1, j0, j1)).toBe(want);
        const span = keySpan(ranges, b, i0, i1);
        const attended: number[] = [];
        for (let i = i0; i < i1; i++) for (let j = 0; j < dims.seqK; j++) if (attends(definition, b, i, j)) attended.push(j);
        if (attended.length === 0) expect(span).toEqual({ start: 0, end: 0, dense: false });
        else {
          expect([span.start, span.end]).toEqual([Math.min(...attended), Math.max(...attended) + 1]);
          expect(span.dense).toBe(attended.length === (i1 - i0) * (span.end - span.start));
        }
      }
    }
    expect(wrong).toBe(0);
    expect(empty).toBeGreaterThan(10);
  });
});
