import type { Tensor } from "@ulysses/tensors";
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
    expect(await fastestRound(run, 3, 2, { now: () => clock })).toBe(0.005);
    expect(call).toBe(6);
  });

  it("adds calls to a round until it has lasted minRoundMs, and averages over all of them", async () => {
    // calls of 10, 30, 20, 20 ms, then 5 ms each
    const durations = [10, 30, 20, 20];
    let clock = 0;
    let call = 0;
    const run = async () => {
      clock += durations[call++] ?? 5;
    };
    // minRoundMs 45: round 1 = 10 + 30 + 20 (60 ms, 3 calls, mean 20); round 2 = 20 + 5 + 5 + 5 + 5 + 5 (45 ms, 6 calls, mean 7.5)
    expect(await fastestRound(run, 2, 2, { now: () => clock, minRoundMs: 45 })).toBe(0.0075);
    expect(call).toBe(9);
  });

  it("names a bad count", async () => {
    await expect(fastestRound(async () => {}, 0, 1)).rejects.toThrow("rounds must be a positive integer, got 0");
    await expect(fastestRound(async () => {}, 1, 1.5)).rejects.toThrow("repeats must be a positive integer, got 1.5");
    await expect(fastestRound(async () => {}, 1, 1, { minRoundMs: -1 })).rejects.toThrow("minRoundMs must be a finite number >= 0, got -1");
  });
});

describe("measureMatmulRate", () => {
  it("is at least 2n³ FLOPs x the timed runs over the whole call's wall time", async () => {
    const n = 128;
    const started = performance.now();
    const rate = await measureMatmulRate({ threads: 1, size: n, rounds: 3, repeats: 2, minRoundMs: 0 });
    const seconds = (performance.now() - started) / 1000;
    expect(Number.isFinite(rate)).toBe(true);
    // 6 timed runs (plus the warm-up and the session) fit in `seconds`, so the fastest round's mean is below seconds / 6
    expect(rate).toBeGreaterThanOrEqual((2 * n ** 3 * 6) / seconds);
  });

  it("times rounds of at least 100 ms by default", async () => {
    const started = performance.now();
    await measureMatmulRate({ threads: 1, size: 32, rounds: 2 });
    expect(performance.now() - started).toBeGreaterThanOrEqual(200);
  });

  it("runs on the cache the option gives, with its settings, gives every output back, and releases the cache", async () => {
    const { SessionCache } = await import("@ulysses/kernels");
    const seen: { settings?: object; runs: number; recycled: Tensor[]; outputs: Tensor[]; released: number } = {
      runs: 0,
      recycled: [],
      outputs: [],
      released: 0,
    };
    class CountingCache extends SessionCache {
      override async run(key: string, build: () => Uint8Array, feeds: Record<string, Tensor>, outputs?: readonly string[]) {
        seen.runs++;
        const result = await super.run(key, build, feeds, outputs);
        seen.outputs.push(result.c!);
        return result;
      }
      override async release() {
        seen.released++;
        await super.release();
      }
    }
    const n = 16;
    const rate = await measureMatmulRate({
      threads: 1,
      size: n,
      rounds: 3,
      repeats: 2,
      minRoundMs: 0,
      spin: false,
      cache: (settings) => {
        seen.settings = settings;
        return { cache: new CountingCache(settings), recycle: (output) => seen.recycled.push(output) };
      },
    });
    expect(Number.isFinite(rate) && rate > 0).toBe(true);
    expect(seen.settings).toEqual({ intraOpThreads: 1, allowSpinning: false });
    // two untimed runs, then 3 rounds of 2
    expect(seen.runs).toBe(8);
    expect(seen.recycled).toEqual(seen.outputs);
    expect(seen.recycled[0]!.shape).toEqual([n, n]);
    expect(seen.released).toBe(1);
  });

  it("releases the given cache when a run fails, and names a run without the product", async () => {
    const { SessionCache } = await import("@ulysses/kernels");
    let released = 0;
    class Broken extends SessionCache {
      override async run() {
        return {};
      }
      override async release() {
        released++;
        await super.release();
      }
    }
    await expect(measureMatmulRate({ threads: 1, size: 8, cache: (settings) => ({ cache: new Broken(settings) }) })).rejects.toThrow(
      "MatMul rate: the cache's run of 'matmul-rate-8' returned no output 'c'",
    );
    expect(released).toBe(1);
  });

  it("names bad options", async () => {
    await expect(measureMatmulRate({ threads: 0 })).rejects.toThrow("MatMul rate: threads must be a positive integer, got 0");
    await expect(measureMatmulRate({ size: -4 })).rejects.toThrow("MatMul rate: size must be a positive integer, got -4");
  });
});
