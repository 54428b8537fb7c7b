import { Worker } from "node:worker_threads";
import { describe, expect, it } from "vitest";
import { Rng, philox4x32, randomNormal, randomUniform, type RngState } from "@ulysses/tensors";

function draw(rng: Rng, n: number): number[] {
  return Array.from({ length: n }, () => rng.uniform());
}

/** Mean and (population) variance in float64. */
function moments(values: ArrayLike<number>): { mean: number; variance: number } {
  let sum = 0;
  for (let i = 0; i < values.length; i++) sum += values[i]!;
  const mean = sum / values.length;
  let squares = 0;
  for (let i = 0; i < values.length; i++) squares += (values[i]! - mean) ** 2;
  return { mean, variance: squares / values.length };
}

describe("philox4x32-10", () => {
  // Known-answer vectors published with Random123 (Salmon et al. 2011), kat_vectors.
  it.each([
    [
      [0, 0, 0, 0],
      [0, 0],
      [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8],
    ],
    [
      [0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff],
      [0xffffffff, 0xffffffff],
      [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
    ],
    [
      [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
      [0xa4093822, 0x299f31d0],
      [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
    ],
  ])("known answer %#", (counter, key, expected) => {
    const out = new Uint32Array(4);
    philox4x32(counter, key, out);
    expect(Array.from(out)).toEqual(expected);
  });

  it("Rng(seed, stream) walks blocks [i, 0, streamLow, streamHigh] under key [seedLow, seedHigh]", () => {
    const seed = 0x0000000500000007n;
    const stream = 0x0000000300000002n;
    const rng = new Rng(seed, stream);
    const words = Array.from({ length: 8 }, () => rng.nextUint32());
    const expected: number[] = [];
    for (const block of [0, 1]) {
      const out = new Uint32Array(4);
      philox4x32([block, 0, 2, 3], [7, 5], out);
      expected.push(...out);
    }
    expect(words).toEqual(expected);
  });
});

describe("Rng determinism", () => {
  it("two instances with the same seed and stream agree", () => {
    const a = new Rng(1234, 5);
    const b = new Rng(1234n, 5n);
    expect(draw(a, 50)).toEqual(draw(b, 50));
    expect(Array.from({ length: 21 }, () => a.normal())).toEqual(Array.from({ length: 21 }, () => b.normal()));
    expect(Array.from({ length: 30 }, () => a.int(7))).toEqual(Array.from({ length: 30 }, () => b.int(7)));
  });

  it("different streams and seeds give different numbers (the high seed word counts)", () => {
    const base = draw(new Rng(1, 0), 8);
    expect(draw(new Rng(1, 1), 8)).not.toEqual(base);
    expect(draw(new Rng(2, 0), 8)).not.toEqual(base);
    expect(draw(new Rng(1 + 2 ** 32, 0), 8)).not.toEqual(base);
    expect(draw(new Rng(1, 2 ** 32), 8)).not.toEqual(base);
  });

  it("uniform is in [0, 1) and built from 53 bits of two words", () => {
    const words = new Rng(9);
    const rng = new Rng(9);
    for (let i = 0; i < 100; i++) {
      const high = words.nextUint32() >>> 5;
      const low = words.nextUint32() >>> 6;
      const u = rng.uniform();
      expect(u).toBe((high * 2 ** 26 + low) * 2 ** -53);
      expect(u >= 0 && u < 1).toBe(true);
    }
  });

  it.each([
    ["a fresh generator", 0, 0],
    ["a block boundary", 8, 0],
    ["the middle of a block", 3, 0],
    ["a pending Box–Muller value", 2, 1],
  ])("getState/setState at %s continues the same sequence (through JSON)", (_label, uniforms, normals) => {
    const original = new Rng(77n, 3);
    for (let i = 0; i < uniforms; i++) original.nextUint32();
    for (let i = 0; i < normals; i++) original.normal();
    const saved = JSON.parse(JSON.stringify(original.getState())) as RngState;
    const resumed = new Rng(1).setState(saved);
    const next = () => [original.normal(), original.uniform(), original.int(1000), original.normal()];
    const nextResumed = () => [resumed.normal(), resumed.uniform(), resumed.int(1000), resumed.normal()];
    for (let i = 0; i < 10; i++) expect(nextResumed()).toEqual(next());
  });

  it("the state is plain JSON-safe numbers", () => {
    const rng = new Rng(2n ** 64n - 1n, 2n ** 63n);
    rng.normal();
    const state = rng.getState();
    expect(state).toEqual(JSON.parse(JSON.stringify(state)));
    expect(state.key).toEqual([0xffffffff, 0xffffffff]);
    expect(state.stream).toEqual([0, 0x80000000]);
    expect(state.counter).toEqual([1, 0]);
    expect(state.position).toBe(4);
    expect(typeof state.spareNormal).toBe("number");
  });

  it("the block counter carries into its high word", () => {
    const rng = new Rng(4).setState({ algorithm: "philox4x32-10", key: [4, 0], stream: [0, 0], counter: [0xffffffff, 0], position: 4, spareNormal: null });
    const words = Array.from({ length: 8 }, () => rng.nextUint32());
    const first = new Uint32Array(4);
    const second = new Uint32Array(4);
    philox4x32([0xffffffff, 0, 0, 0], [4, 0], first);
    philox4x32([0, 1, 0, 0], [4, 0], second);
    expect(words).toEqual([...first, ...second]);
    expect(rng.getState().counter).toEqual([1, 1]);
  });
});

describe("Rng statistics (n = 10^6; bounds are about 6 standard errors)", () => {
  const n = 1_000_000;

  it("uniform: mean 1/2, variance 1/12", () => {
    const { mean, variance } = moments(new Rng(11).fillUniform(new Float64Array(n)));
    expect(Math.abs(mean - 0.5)).toBeLessThan(6 * Math.sqrt(1 / 12 / n));
    expect(Math.abs(variance - 1 / 12)).toBeLessThan(6 * Math.sqrt(1 / 180 / n));
  });

  it("normal: mean, variance, and the fraction beyond 1.96 sigma", () => {
    const x = new Rng(12).fillNormal(new Float64Array(n), 3, 2);
    const { mean, variance } = moments(x);
    expect(Math.abs(mean - 3)).toBeLessThan(6 * Math.sqrt(4 / n));
    expect(Math.abs(variance - 4)).toBeLessThan(6 * 4 * Math.sqrt(2 / n));
    let tails = 0;
    for (const v of x) if (Math.abs(v - 3) > 2 * 1.959964) tails++;
    expect(Math.abs(tails / n - 0.05)).toBeLessThan(6 * Math.sqrt((0.05 * 0.95) / n));
  });

  it("int(10): chi-square over the 10 values below 27.9 (p = 0.001, 9 degrees of freedom)", () => {
    const rng = new Rng(13);
    const counts = new Array<number>(10).fill(0);
    for (let i = 0; i < 200_000; i++) counts[rng.int(10)]!++;
    const expected = 20_000;
    const chi2 = counts.reduce((s, c) => s + (c - expected) ** 2 / expected, 0);
    expect(chi2).toBeLessThan(27.88);
  });

  it("int beyond 2^32 stays in range and reaches the upper half", () => {
    const rng = new Rng(14);
    const max = 3 * 2 ** 40 + 5;
    let upper = 0;
    for (let i = 0; i < 2000; i++) {
      const v = rng.int(max);
      expect(Number.isInteger(v) && v >= 0 && v < max).toBe(true);
      if (v >= max / 2) upper++;
    }
    expect(Math.abs(upper - 1000)).toBeLessThan(6 * Math.sqrt(500));
    expect(rng.int(1)).toBe(0);
  });
});

describe("fill helpers and random tensors", () => {
  it("fillUniform stays in [low, high), also after rounding to float32", () => {
    const a = new Rng(21).fillUniform(new Float32Array(100_000), 1, 2);
    let min = Infinity;
    let max = -Infinity;
    for (const v of a) {
      min = Math.min(min, v);
      max = Math.max(max, v);
    }
    expect(min).toBeGreaterThanOrEqual(1);
    expect(max).toBeLessThan(2);
    expect(max).toBeGreaterThan(1.999);
  });

  it("randomUniform and randomNormal equal a fresh generator's fills, in row-major order", () => {
    const u = randomUniform([3, 4], { seed: 5, stream: 2, low: -1, high: 1 });
    expect(u.dtype).toBe("float32");
    expect(u.shape).toEqual([3, 4]);
    expect(Array.from(u.data)).toEqual(Array.from(new Rng(5, 2).fillUniform(new Float32Array(12), -1, 1)));
    const z = randomNormal([5, 3], { seed: 5n, mean: 1, std: 0.5, dtype: "float64" });
    expect(z.data).toBeInstanceOf(Float64Array);
    expect(Array.from(z.data)).toEqual(Array.from(new Rng(5).fillNormal(new Float64Array(15), 1, 0.5)));
  });

  it("a given rng is advanced, so two tensors from it differ", () => {
    const rng = new Rng(6);
    const a = randomNormal([8], { rng });
    const b = randomNormal([8], { rng });
    expect(Array.from(a.data)).not.toEqual(Array.from(b.data));
    const reference = new Rng(6).fillNormal(new Float32Array(16));
    expect([...a.data, ...b.data]).toEqual(Array.from(reference));
  });

  it("gives the same numbers inside a worker_thread", async () => {
    const count = 64;
    const seed = 2n ** 40n + 3n;
    const stream = 4;
    const worker = new Worker(new URL("./testing-fixtures/rng-worker.mjs", import.meta.url), {
      execArgv: ["--conditions=@ulysses/source"],
      workerData: { seed, stream, count },
      env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" },
    });
    const exited = new Promise<number>((resolve) => worker.once("exit", resolve));
    const reply = await new Promise<{
      isMainThread: boolean;
      threadId: number;
      uniforms: number[];
      normals: number[];
      ints: number[];
      tensor: Float32Array;
    }>((resolve, reject) => {
      worker.once("message", resolve);
      worker.once("error", reject);
    });
    expect(await exited).toBe(0);
    expect(reply.isMainThread).toBe(false);
    expect(reply.threadId).toBeGreaterThan(0);
    const rng = new Rng(seed, stream);
    expect(reply.uniforms).toEqual(draw(rng, count));
    expect(reply.normals).toEqual(Array.from({ length: count }, () => rng.normal()));
    expect(reply.ints).toEqual(Array.from({ length: count }, () => rng.int(1000)));
    expect(Array.from(reply.tensor)).toEqual(Array.from(randomNormal([count], { seed, stream: stream + 1 }).data));
  });
});
