/**
 * The spans OrtAttention's runs visit: the plain causal plan unchanged
 * without documents; with documents, blocks inside a document visit only its
 * keys with the unmasked or causal graphs, only blocks across a boundary are
 * "masked", and backward tiles no query attends are skipped. The keys
 * visited add up to what the documents need, not what the whole row would.
 */
import { describe, expect, it } from "vitest";
import { planBlocks } from "./block-plan.js";
import { documentRanges } from "./documents.js";
import { documentBias, documentBiasTransposed, planSpans, spanTiles } from "./key-spans.js";
import type { AttentionDims } from "./shapes.js";

function dims(seqQ: number, seqK: number, causal: boolean, lengths?: number[]): AttentionDims {
  const base = { batch: 1, seqQ, seqK, heads: 2, kvHeads: 1, headDim: 8, group: 2, scale: 1, causal, offset: seqK - seqQ };
  if (lengths === undefined) return base;
  const ids = Int32Array.from(lengths.flatMap((length, id) => new Array<number>(length).fill(id)));
  return { ...base, documents: { query: ids.subarray(seqK - seqQ), key: ids } };
}

const compact = (spans: ReturnType<typeof planSpans>) => spans.map((s) => [s.start, s.end, s.variant]);

describe("planSpans and spanTiles", () => {
  it("without documents: keys [0, keyEnd), causal blocks diagonal, tiles as before", () => {
    const d = dims(100, 100, true);
    const plan = planBlocks(d, 32);
    expect(compact(planSpans(d, plan))).toEqual([
      [0, 32, "diagonalOnly"],
      [0, 64, "diagonal"],
      [0, 96, "diagonal"],
      [0, 100, "diagonal"],
    ]);
    const [, , third] = plan.blocks;
    expect(spanTiles(planSpans(d, plan)[2]!, third!, 40, undefined, 0)).toEqual([
      { start: 0, length: 40, diagonal: false, variant: "full" },
      { start: 40, length: 24, diagonal: false, variant: "full" },
      { start: 64, length: 32, diagonal: true, variant: "diagonalOnly" },
    ]);
    const whole = dims(10, 50, false);
    const wholePlan = planBlocks(whole, 32);
    expect(spanTiles(planSpans(whole, wholePlan)[0]!, wholePlan.blocks[0]!, 20, undefined, 0).map((t) => [t.start, t.length, t.variant])).toEqual([
      [0, 20, "full"],
      [20, 20, "full"],
      [40, 10, "full"],
    ]);
  });

  it("causal documents on block boundaries: each block visits only its document, as a shifted diagonal", () => {
    const d = dims(128, 128, true, [32, 64, 32]);
    const spans = planSpans(d, planBlocks(d, 32), documentRanges(d.documents, d));
    expect(compact(spans)).toEqual([
      [0, 32, "diagonalOnly"],
      [32, 64, "diagonalOnly"],
      [32, 96, "diagonal"],
      [96, 128, "diagonalOnly"],
    ]);
    // Scores computed: 3 * 32 * 32 + 32 * 64 = 5120, against 32 * (32 + 64 + 96 + 128) = 10240 for the plain causal plan.
    expect(spans.reduce((a, s) => a + 32 * (s.end - s.start), 0)).toBe(5120);
  });

  it("8 documents of 64 cost 8 attentions of 64, whatever the row's length", () => {
    const d = dims(512, 512, true, new Array(8).fill(64));
    const spans = planSpans(d, planBlocks(d, 64), documentRanges(d.documents, d));
    const alone = planSpans(dims(64, 64, true), planBlocks(dims(64, 64, true), 64));
    expect(spans.reduce((a, s) => a + (s.end - s.start), 0)).toBe(8 * alone.reduce((a, s) => a + (s.end - s.start), 0));
  });

  it("a block across a boundary is masked; its backward skips tiles no query attends and leaves whole ones unmasked", () => {
    // Non-causal documents [0, 10), [10, 50), [50, 64); one block of all 64 queries.
    const d = dims(64, 64, false, [10, 40, 14]);
    const plan = planBlocks(d, 64);
    const ranges = documentRanges(d.documents, d);
    const [span] = planSpans(d, plan, ranges);
    expect(span).toEqual({ start: 0, end: 64, variant: "masked" });
    // Queries [20, 40) alone attend [10, 50): one dense span.
    const inner = { start: 20, rows: 20, keyEnd: 64, diagonal: false, rowOffset: 0 };
    const tiles = spanTiles({ start: 10, end: 50, variant: "masked" }, inner, 8, ranges, 0);
    expect(tiles.map((t) => t.variant)).toEqual(["full", "full", "full", "full", "full"]);
    expect(spanTiles(span!, plan.blocks[0]!, 16, ranges, 0).map((t) => [t.start, t.length, t.variant])).toEqual([
      [0, 16, "masked"],
      [16, 16, "masked"],
      [32, 16, "masked"],
      [48, 16, "masked"],
    ]);
    // The bias and its transpose: 0 exactly where the query's document is the key's.
    const bias = documentBias(ranges, 0, plan.blocks[0]!, 0, 64);
    const biasT = documentBiasTransposed(ranges, 0, plan.blocks[0]!, 16, 16, new Float32Array(16 * 64));
    const doc = (t: number) => (t < 10 ? 0 : t < 50 ? 1 : 2);
    let wrong = 0;
    for (let i = 0; i < 64; i++) {
      for (let j = 0; j < 64; j++) if ((bias[i * 64 + j] === 0) !== (doc(i) === doc(j))) wrong++;
      for (let j = 0; j < 16; j++) if ((biasT[j * 64 + i] === 0) !== (doc(i) === doc(16 + j))) wrong++;
    }
    expect(wrong).toBe(0);
  });

  it("tiles of a masked span that no query attends are skipped, and a block whose queries attend nothing is empty", () => {
    // Keys of documents 0, 1, 2; queries only of documents 0 and 2, and of 5 (no keys).
    const ids = Int32Array.from([0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2]);
    const base = dims(8, 16, false);
    const d = { ...base, documents: { query: Int32Array.from([0, 0, 2, 2, 5, 5, 5, 5]), key: ids } };
    const plan = planBlocks(d, 4);
    const ranges = documentRanges(d.documents, d);
    const spans = planSpans(d, plan, ranges);
    expect(compact(spans)).toEqual([
      [0, 16, "masked"],
      [0, 0, "empty"],
    ]);
    expect(spanTiles(spans[0]!, plan.blocks[0]!, 4, ranges, 0).map((t) => [t.start, t.variant])).toEqual([
      [0, "masked"],
      [12, "masked"],
    ]);
  });
});
