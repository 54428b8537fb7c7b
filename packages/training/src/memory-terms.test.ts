import { describe, expect, it } from "vitest";
import { adamwMomentBytes } from "./memory-terms.js";

describe("adamwMomentBytes", () => {
  it("two fp32 moments per parameter on every rank, or one sharded pair plus the pair a checkpoint gathers under ZeRO-1", () => {
    expect(adamwMomentBytes(100, 4, false)).toBe(4 * 2 * 4 * 100);
    expect(adamwMomentBytes(100, 4, true)).toBe(2 * 2 * 4 * 100);
    expect(adamwMomentBytes(100, 1, true)).toBe(2 * 2 * 4 * 100);
  });
});
