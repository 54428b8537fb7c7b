import { describe, expect, it } from "vitest";
import { fastestRound, measureMatmulRate } from "./matmul-rate.js";

describe("fastestRound", () => {
  it("keeps the fastest round's mean per call", async () => {
    // a fake clock: each call takes the next duration (ms)
    const durations = [30, 10, 20, 40, 5, 5];
    let clock = 0;
    let call = 0;
    const run = async () => {
      clock += durations[call++]!;
    };
    // rounds of 2 calls: (30 + 10) / 2, (20 + 40) / 2, (5 + 5) / 2 ms
    expect(await fastestRound(run, 3, 2, () => clock)).toBe(0.005);
    expect(call).toBe(6);
  });

  it("names a bad count", async () => {
    await expect(fastestRound(async () => {}, 0, 1)).rejects.toThrow("rounds must be a positive integer, got 0");
    await expect(fastestRound(async () => {}, 1, 1.5)).rejects.toThrow("repeats must be a positive integer, got 1.5");
  });
});

describe("measureMatmulRate", () => {
  it("is at least 2n³ FLOPs x the timed runs over the whole call's wall time", async () => {
    const n = 128;
    const started = performance.now();
    const rate = await measureMatmulRate({ threads: 1, size: n, rounds: 3, repeats: 2 });
    const seconds = (performance.now() - started) / 1000;
    expect(Number.isFinite(rate)).toBe(true);
    // 6 timed runs (plus the warm-up and the session) fit in `seconds`, so the fastest round's mean is below seconds / 6
    expect(rate).toBeGreaterThanOrEqual((2 * n ** 3 * 6) / seconds);
  });

  it("names bad options", async () => {
    await expect(measureMatmulRate({ threads: 0 })).rejects.toThrow("MatMul rate: threads must be a positive integer, got 0");
    await expect(measureMatmulRate({ size: -4 })).rejects.toThrow("MatMul rate: size must be a positive integer, got -4");
  });
});
