import { describe, expect, it } from "vitest";
import { ringPairsPerStep, ringPassSeconds } from "./sp-cost.js";

/**
 * Independent reference: the token positions each ring group holds, and the
 * causal (query, key) pairs (key ≤ query) between the queries of group `q`
 * and the keys of group `k`, counted one by one.
 */
function positions(seqLen: number, groups: number, layout: "zigzag" | "contiguous", group: number): number[] {
  if (layout === "contiguous") {
    const block = seqLen / groups;
    return Array.from({ length: block }, (_, i) => group * block + i);
  }
  const chunk = seqLen / (2 * groups);
  const first = Array.from({ length: chunk }, (_, i) => group * chunk + i);
  const second = Array.from({ length: chunk }, (_, i) => (2 * groups - 1 - group) * chunk + i);
  return [...first, ...second];
}

function causalPairs(queries: number[], keys: number[]): number {
  let n = 0;
  for (const q of queries) for (const k of keys) if (k <= q) n++;
  return n;
}

describe("ring attention work per step", () => {
  it("zigzag: every group attends N(N+1)/(2r) pairs; own block 2c²+c, every other block 2c² (counted pair by pair)", () => {
    const seqLen = 48;
    const r = 3;
    const steps = ringPairsPerStep(seqLen, r, true, "zigzag");
    const c = seqLen / (2 * r);
    expect(steps).toEqual([2 * c * c + c, 2 * c * c, 2 * c * c]);
    for (let g = 0; g < r; g++) {
      const mine = positions(seqLen, r, "zigzag", g);
      expect(causalPairs(mine, mine)).toBe(steps[0]);
      let total = 0;
      for (let other = 0; other < r; other++) {
        const pairs = causalPairs(mine, positions(seqLen, r, "zigzag", other));
        if (other !== g) expect(pairs).toBe(2 * c * c);
        total += pairs;
      }
      expect(total).toBe((seqLen * (seqLen + 1)) / 2 / r);
    }
  });

  it("contiguous: the last group is the slowest, B(B+1)/2 on its own block and B² on each earlier one; the first does only its own", () => {
    const seqLen = 32;
    const r = 4;
    const block = seqLen / r;
    const steps = ringPairsPerStep(seqLen, r, true, "contiguous");
    expect(steps).toEqual([(block * (block + 1)) / 2, block * block, block * block, block * block]);
    const work = Array.from({ length: r }, (_, g) =>
      Array.from({ length: r }, (_, k) => causalPairs(positions(seqLen, r, "contiguous", g), positions(seqLen, r, "contiguous", k))).reduce((a, b) => a + b, 0),
    );
    expect(Math.max(...work)).toBe(steps.reduce((a, b) => a + b, 0));
    expect(work[0]).toBe((block * (block + 1)) / 2);
    // Slowest over balanced: ((2r−1)B + 1) / (rB + 1) = (7·8 + 1) / (4·8 + 1) = 57/33.
    const balanced = (seqLen * (seqLen + 1)) / 2 / r;
    expect(Math.max(...work) / balanced).toBeCloseTo(57 / 33, 12);
  });

  it("non-causal: B² every step; r = 1 is the whole causal sequence (Ulysses)", () => {
    expect(ringPairsPerStep(24, 3, false, "zigzag")).toEqual([64, 64, 64]);
    expect(ringPairsPerStep(24, 1, true, "zigzag")).toEqual([(24 * 25) / 2]);
    expect(ringPairsPerStep(24, 1, true, "contiguous")).toEqual([(24 * 25) / 2]);
  });

  it("a pass: max(compute, transfer) per step with overlap, compute + transfer without, no transfer after the last step", () => {
    expect(ringPassSeconds([1, 2, 3], 2.5, true)).toEqual({ total: 2.5 + 2.5 + 3, compute: 6 });
    expect(ringPassSeconds([1, 2, 3], 2.5, false)).toEqual({ total: 1 + 2.5 + 2 + 2.5 + 3, compute: 6 });
    expect(ringPassSeconds([4, 4], 1, true)).toEqual({ total: 8, compute: 8 });
    expect(ringPassSeconds([7], 100, true)).toEqual({ total: 7, compute: 7 });
  });
});
