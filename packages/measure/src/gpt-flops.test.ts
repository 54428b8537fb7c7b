import { describe, expect, it } from "vitest";
import {
  attendedPairs,
  attentionFlops,
  documentPairs,
  gptForwardFlops,
  gptMatrixWeights,
  gptTrainingFlops,
  gptTrainingFlopsOverPairs,
  matmulFlopsPerToken,
} from "./gpt-flops.js";

/** Counts the pairs a causal mask keeps by visiting every (query, key) pair. */
function countPairs(seq: number, causal: boolean): number {
  let pairs = 0;
  for (let q = 0; q < seq; q++) for (let k = 0; k < seq; k++) if (!causal || k <= q) pairs++;
  return pairs;
}

describe("GPT FLOPs", () => {
  it("matrix weights: q, k, v, o, the MLP and the head, listed by hand", () => {
    // 1 layer, hidden 4, MLP 4 wide, vocab 8: q, k, v, o 4x4, up 4x4, down 4x4, head 4x8
    expect(gptMatrixWeights({ layers: 1, hidden: 4, vocab: 8, mlpHidden: 4 })).toBe(6 * 16 + 32);
    // grouped-query attention (k, v 4x2) and SwiGLU (gate, up 4x16; down 16x4), 2 layers, no head
    expect(gptMatrixWeights({ layers: 2, hidden: 4, vocab: 0, mlpHidden: 16, kvWidth: 2, gatedMlp: true })).toBe(2 * (16 + 16 + 8 + 8 + 3 * 64));
    // a head width other than hidden / heads (Qwen3): q 4x6 and o 6x4, k and v 4x2, MLP 4x4 twice
    expect(gptMatrixWeights({ layers: 1, hidden: 4, vocab: 0, mlpHidden: 4, qWidth: 6, kvWidth: 2 })).toBe(24 + 24 + 8 + 8 + 16 + 16);
    // GPT-2 small: 12 layers x 12 h^2 plus the tied head 50257 x 768
    expect(gptMatrixWeights({ layers: 12, hidden: 768, vocab: 50257, mlpHidden: 3072 })).toBe(84_934_656 + 38_597_376);
  });

  it("2 FLOPs per matrix weight per token", () => {
    expect(matmulFlopsPerToken({ layers: 1, hidden: 256, vocab: 0, mlpHidden: 1024 })).toBe(24 * 256 * 256);
  });

  it("attended pairs match a count over every (query, key) pair", () => {
    for (const seq of [1, 2, 5, 16]) for (const causal of [false, true]) expect(attendedPairs(seq, causal)).toBe(countPairs(seq, causal));
  });

  it("document pairs match a count over every (query, key) pair a causal document mask keeps, row by row", () => {
    const ids = [0, 0, 0, 1, 1, 2, 7, 7, 7, 7, 7, 7, 3, 4, 4, 4, 4, 9];
    for (const seq of [1, 2, 3, 6, 9, 18]) {
      let pairs = 0;
      for (let row = 0; row < ids.length; row += seq) for (let q = row; q < row + seq; q++) for (let k = row; k <= q; k++) if (ids[k] === ids[q]) pairs++;
      expect(documentPairs(ids, seq), `rows of ${seq}`).toBe(pairs);
    }
    expect(documentPairs(new Int32Array(16), 16)).toBe(attendedPairs(16, true));
    expect(() => documentPairs(ids, 4)).toThrow(/18 ids do not make whole rows of 4/);
  });

  it("a step over attended pairs: the matrices per token plus 12·width per pair and layer; one document a row is the causal count", () => {
    const d = { layers: 3, hidden: 8, vocab: 10, mlpHidden: 16, qWidth: 12, kvWidth: 4, gatedMlp: true };
    expect(gptTrainingFlopsOverPairs(d, 40, 100)).toBe(3 * 40 * matmulFlopsPerToken(d) + 3 * 12 * 12 * 100);
    expect(gptTrainingFlopsOverPairs(d, 4 * 10, 4 * attendedPairs(10, true))).toBe(gptTrainingFlops(d, 10, true, 4));
    expect(() => gptTrainingFlopsOverPairs(d, 40, -1)).toThrow(/attended pairs must be an integer >= 0, got -1/);
  });

  it("attention: 4·width per pair forward, 8 backward, 12 both", () => {
    const shape = { seq: 5, width: 4, causal: true };
    expect(attentionFlops(shape)).toBe(4 * 4 * 15);
    expect(attentionFlops(shape, "backward")).toBe(8 * 4 * 15);
    expect(attentionFlops(shape, "training")).toBe(12 * 4 * 15);
  });

  it("forward of a sequence: 24·N·h² per layer plus the head, and 4·h per attended pair", () => {
    const d = { layers: 2, hidden: 1024, vocab: 1000, mlpHidden: 4096 };
    const f = gptForwardFlops(d, 2048, false);
    expect(f.matmul).toBe(2 * 24 * 2048 * 1024 * 1024 + 2 * 2048 * 1024 * 1000);
    expect(f.attention).toBe(2 * 4 * 2048 * 2048 * 1024);
    expect(gptForwardFlops(d, 2048, true).attention).toBe(2 * 4 * ((2048 * 2049) / 2) * 1024);
    // the attention's width is heads x head dim when that is not hidden
    expect(gptForwardFlops({ ...d, qWidth: 1536 }, 2048, true).attention).toBe(2 * 4 * ((2048 * 2049) / 2) * 1536);
  });

  it("a training step is 3 forwards", () => {
    const d = { layers: 1, hidden: 4, vocab: 8, mlpHidden: 4 };
    // two sequences of 5: 10 tokens x 6 per weight, and 3 x 4·h per causal pair (15 pairs) per sequence
    expect(gptTrainingFlops(d, 5, true, 2)).toBe(10 * 6 * 128 + 2 * 3 * 4 * 4 * 15);
  });

  it("names bad sizes", () => {
    expect(() => gptMatrixWeights({ layers: 0, hidden: 4, vocab: 8, mlpHidden: 4 })).toThrow("GPT layers must be an integer >= 1, got 0");
    expect(() => attendedPairs(2.5, true)).toThrow("sequence length must be an integer >= 1, got 2.5");
    expect(() => gptTrainingFlops({ layers: 1, hidden: 4, vocab: 8, mlpHidden: 4 }, 5, true, -1)).toThrow("sequences must be a finite number >= 0, got -1");
  });
});
