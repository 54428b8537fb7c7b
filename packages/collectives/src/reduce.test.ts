import { describe, expect, it } from "vitest";
import { reduceInto } from "./reduce.js";

describe("reduceInto", () => {
  it("reduces in rank order with float32 rounding per step", () => {
    const a = Float32Array.from([1e8, 1]);
    const b = Float32Array.from([1, 1]);
    const c = Float32Array.from([-1e8, 1]);
    const out = new Float32Array(2);
    reduceInto("float32", "sum", out, 0, [a, b, c].map((data) => ({ data, offset: 0 })), 2);
    // (1e8 + 1) rounds to 1e8 in float32, then - 1e8 = 0
    expect(Array.from(out)).toEqual([0, 3]);
  });

  it("reduces bfloat16 bits in float32 and rounds once at the end", () => {
    // bfloat16 bits: 1.0 = 0x3f80, 2^-8 = 0x3b80; in float32, 1 + 2^-8 + 2^-8 = 1 + 2^-7 = 0x3f81 exactly
    const sources = [0x3f80, 0x3b80, 0x3b80].map((bits) => ({ data: Uint16Array.from([bits]), offset: 0 }));
    const out = new Uint16Array(1);
    reduceInto("bfloat16", "sum", out, 0, sources, 1);
    expect(out[0]).toBe(0x3f81);
  });
});
