import { describe, expect, it } from "vitest";
import { niceRange, niceStep, niceTicks } from "./nice-ticks.js";

describe("round ticks", () => {
  it("steps of 1, 2, 2.5 or 5 times a power of ten", () => {
    expect(niceStep(0, 4.2)).toBe(1);
    expect(niceStep(0, 12)).toBe(2.5);
    expect(niceStep(0, 0.009)).toBe(0.002);
  });

  it("ticks inside the range", () => {
    expect(niceTicks(0, 4.2)).toEqual([0, 1, 2, 3, 4]);
    expect(niceTicks(1, 300)).toEqual([100, 200, 300]);
    expect(niceTicks(0.5, 1.3)).toEqual([0.6, 0.8, 1, 1.2]);
    expect(niceTicks(3, 3)).toEqual([3]);
  });

  it("a range widened to whole steps", () => {
    expect(niceRange(0, 4.2)).toEqual({ min: 0, max: 5, ticks: [0, 1, 2, 3, 4, 5] });
    // step 1.2 / 5 = 0.24 -> 0.25; -0.3 widens down to -0.5, 0.9 up to 1
    expect(niceRange(-0.3, 0.9)).toEqual({ min: -0.5, max: 1, ticks: [-0.5, -0.25, 0, 0.25, 0.5, 0.75, 1] });
    // an empty range becomes one unit wide
    expect(niceRange(2, 2)).toEqual({ min: 2, max: 3, ticks: [2, 2.2, 2.4, 2.6, 2.8, 3] });
  });
});
