import { describe, expect, it } from "vitest";
import { reduceInto } from "./reduce.js";

describe("reduceInto", () => {
  it("reduces in rank order with float32 rounding per step", () => {
    const a = Float32Array.from([1e8, 1]);
    const b = Float32Array.from([1, 1]);
    const c = Float32Array.from([-1e8, 1]);
    const out = new Float32Array(2);
    reduceInto(
      "float32",
      "sum",
      out,
      0,
      [a, b, c].map((data) => ({ data, offset: 0 })),
      2,
    );
    // (1e8 + 1) rounds to 1e8 in float32, then - 1e8 = 0
    expect(Array.from(out)).toEqual([0, 3]);
  });

  it("float32 sums over many ranks round after every add, in rank order", () => {
    // 7 ranks: each partial sum rounded to float32, checked against a step-by-step Math.fround fold
    const ranks = Array.from({ length: 7 }, (_, r) =>
      Float32Array.from({ length: 5 }, (_, i) => Math.fround((r % 2 ? 1e7 : 0.3) * (i + 1) * (r % 3 === 0 ? -1 : 1) + r / 7)),
    );
    const out = new Float32Array(6);
    reduceInto(
      "float32",
      "sum",
      out,
      1,
      ranks.map((data) => ({ data, offset: 0 })),
      5,
    );
    for (let i = 0; i < 5; i++) {
      let acc = ranks[0]![i]!;
      for (let r = 1; r < 7; r++) acc = Math.fround(acc + ranks[r]![i]!);
      expect(out[i + 1]).toBe(acc);
    }
    expect(out[0]).toBe(0);
  });

  it("reduces bfloat16 bits in float32 and rounds once at the end", () => {
    // bfloat16 bits: 1.0 = 0x3f80, 2^-8 = 0x3b80; in float32, 1 + 2^-8 + 2^-8 = 1 + 2^-7 = 0x3f81 exactly
    const sources = [0x3f80, 0x3b80, 0x3b80].map((bits) => ({ data: Uint16Array.from([bits]), offset: 0 }));
    const out = new Uint16Array(1);
    reduceInto("bfloat16", "sum", out, 0, sources, 1);
    expect(out[0]).toBe(0x3f81);
  });
});
