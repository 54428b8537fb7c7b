import { describe, expect, it } from "vitest";
import { median, medianBy, medianOfSlowest, percentile } from "./median.js";

describe("median and percentiles", () => {
  it("median: the middle sample of an odd count, the upper middle one of an even count", () => {
    expect(median([5, 1, 3])).toBe(3);
    expect(median([4, 1, 3, 2])).toBe(3);
    expect(median([7])).toBe(7);
    expect(median([2, -1, Infinity])).toBe(2);
  });

  it("does not reorder the caller's array", () => {
    const values = [3, 1, 2];
    median(values);
    expect(values).toEqual([3, 1, 2]);
  });

  it("percentile: the sample at sorted index floor(p/100 * n), capped at the last", () => {
    const values = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100];
    expect(percentile(values, 0)).toBe(10);
    expect(percentile(values, 25)).toBe(30); // index 2
    expect(percentile(values, 90)).toBe(100); // index 9
    expect(percentile(values, 100)).toBe(100);
    expect(percentile(values, 50)).toBe(median(values));
  });

  it("medianBy returns the item itself", () => {
    const runs = [
      { ms: 9, id: "a" },
      { ms: 3, id: "b" },
      { ms: 5, id: "c" },
    ];
    expect(medianBy(runs, (r) => r.ms).id).toBe("c");
  });

  it("medianOfSlowest: each repetition's slowest rank, then the median repetition", () => {
    // slowest per repetition: 3, 4, 2.5 -> median 3
    expect(
      medianOfSlowest([
        [3, 1, 2],
        [1, 4, 2.5],
      ]),
    ).toBe(3);
    // the repetition only rank 0 has is left out: slowest 2, 5 -> upper middle 5
    expect(
      medianOfSlowest([
        [1, 5, 100],
        [2, 3],
      ]),
    ).toBe(5);
    expect(medianOfSlowest([[7]])).toBe(7);
  });

  it("names what is wrong", () => {
    expect(() => median([])).toThrow("median of no samples");
    expect(() => median([1, Number.NaN])).toThrow("median: sample 1 is NaN");
    expect(() => percentile([1], 101)).toThrow("percentile must be between 0 and 100, got 101");
    expect(() => medianOfSlowest([[1], []])).toThrow("every rank needs at least one repetition, got 1, 0");
    expect(() => medianOfSlowest([])).toThrow("got no ranks");
  });
});
