import { describe, expect, it } from "vitest";
import { searchMaximum } from "./max-seq-search.js";

const under = (threshold: number) => async (n: number) => n <= threshold;

describe("searchMaximum", () => {
  it("finds the largest multiple of the step under a threshold", async () => {
    for (const threshold of [512, 700, 1024, 5000, 7679, 7680, 12345]) {
      const r = await searchMaximum(under(threshold), 256, 1 << 20);
      expect(r.best).toBe(Math.floor(threshold / 256) * 256);
      expect(r.firstFailure).toBe(r.best + 256);
    }
  });

  it("returns 0 when the first step already fails", async () => {
    const r = await searchMaximum(under(100), 256, 4096);
    expect(r).toMatchObject({ best: 0, firstFailure: 256 });
    expect(r.probes).toEqual([{ value: 256, ok: false }]);
  });

  it("stops at the limit when everything fits", async () => {
    const r = await searchMaximum(under(Infinity), 256, 3000);
    expect(r.best).toBe(2816);
    expect(r.firstFailure).toBe(Infinity);
  });

  it("uses few probes (doubling then bisection)", async () => {
    const r = await searchMaximum(under(9000), 256, 1 << 20);
    expect(r.probes.length).toBeLessThanOrEqual(2 * Math.ceil(Math.log2(9000 / 256)) + 1);
  });

  it("rejects a bad step or limit", async () => {
    await expect(searchMaximum(under(1), 0, 10)).rejects.toThrow(/step must be a positive integer, got 0/);
    await expect(searchMaximum(under(1), 256, 100)).rejects.toThrow(/limit 100 is below the step 256/);
  });
});
