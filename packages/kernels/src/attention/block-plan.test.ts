import { describe, expect, it } from "vitest";
import { planBlocks, swapMiddleAxes } from "./block-plan.js";
import type { AttentionDims } from "./shapes.js";

function dims(seqQ: number, seqK: number, causal: boolean): AttentionDims {
  return { batch: 2, seqQ, seqK, heads: 4, kvHeads: 2, headDim: 8, group: 2, scale: 1, causal, offset: seqK - seqQ };
}

describe("planBlocks", () => {
  it("causal blocks visit keys only up to their diagonal", () => {
    const plan = planBlocks(dims(100, 100, true), 32);
    expect(plan.blocks.map((b) => [b.start, b.rows, b.keyEnd])).toEqual([
      [0, 32, 32],
      [32, 32, 64],
      [64, 32, 96],
      [96, 4, 100],
    ]);
    // Scores computed: sum(rows * keyEnd) = 6544 of the 10000 a masking kernel computes (5050 needed).
    expect(plan.blocks.reduce((a, b) => a + b.rows * b.keyEnd, 0)).toBe(6544);
    expect(plan.totalRows).toBe(100 * 2 * 4);
  });

  it("bottom-right alignment: seqQ < seqK shifts key ends, seqQ > seqK skips queries without keys", () => {
    expect(planBlocks(dims(40, 100, true), 32).blocks.map((b) => b.keyEnd)).toEqual([92, 100]);
    const late = planBlocks(dims(100, 30, true), 32);
    expect(late.qStart).toBe(70);
    expect(late.blocks.map((b) => [b.start, b.rows, b.keyEnd, b.rowOffset])).toEqual([[70, 30, 30, 0]]);
    expect(late.totalRows).toBe(30 * 8);
  });

  it("non-causal blocks see every key", () => {
    expect(planBlocks(dims(70, 50, false), 32).blocks.map((b) => [b.start, b.rows, b.keyEnd, b.diagonal])).toEqual([
      [0, 32, 50, false],
      [32, 32, 50, false],
      [64, 6, 50, false],
    ]);
  });
});

describe("layout helpers", () => {
  it("swapMiddleAxes moves [b, s, h, d] <-> [b, h, s, d]", () => {
    // src [1, 3, 2, 2]: value = 100*s + 10*h + e
    const src = new Float32Array(12);
    for (let s = 0; s < 3; s++) for (let h = 0; h < 2; h++) for (let e = 0; e < 2; e++) src[(s * 2 + h) * 2 + e] = 100 * s + 10 * h + e;
    const swapped = swapMiddleAxes(src, 1, 3, 2, 2, new Float32Array(12));
    expect(Array.from(swapped)).toEqual([0, 1, 100, 101, 200, 201, 10, 11, 110, 111, 210, 211]);
    expect(Array.from(swapMiddleAxes(swapped, 1, 2, 3, 2, new Float32Array(12)))).toEqual(Array.from(src));
  });
});
