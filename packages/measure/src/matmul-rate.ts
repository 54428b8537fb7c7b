/**
 * The MatMul rate of this machine: FLOP/s of an n × n × n float32 MatMul in
 * ONNX Runtime, the denominator of the trainer's MFU and the reference of
 * the kernel benchmarks. Two untimed runs create the session (and, on a
 * cache that runs graphs natively after their first run, the native plan);
 * then `rounds` rounds of back-to-back runs are timed, each at least
 * `repeats` runs and `minRoundMs` long, and the fastest round's mean counts
 * (on a shared machine other work only ever slows a round down).
 *
 * What runs the MatMul matters. By default it is @ulysses/kernels'
 * SessionCache, that is onnxruntime-node, which allocates every output and
 * copies it into a fresh zero-filled ArrayBuffer; ONNX Runtime's same kernel
 * on the caller's arrays, outputs reused (the native package's
 * NativeSessionCache through the `cache` option), measures the machine
 * without those copies, which otherwise understate the rate and overstate
 * every MFU taken against it (measured: docs/results/measure/matmul-rate.md).
 * So the trainer measures on the addon's path whenever the addon loads.
 *
 * Rounds last at least 100 ms by default: a step runs for hundreds of ms, so
 * its MFU is taken against the rate the machine sustains for that long, not
 * against a burst a few ms long. onnxruntime-node is loaded on the first
 * call, not on import, so the package's arithmetic needs no ONNX Runtime.
 */
import os from "node:os";
import type { SessionCache } from "@ulysses/kernels";
import { randomUniform, type Tensor } from "@ulysses/tensors";
import { MeasureError } from "./errors.js";

export interface MatmulRateOptions {
  /** ONNX Runtime intra-op threads (default: every core, os.availableParallelism()). */
  threads?: number;
  /** n of the n × n × n product (default 1024). */
  size?: number;
  /** ONNX Runtime's spinning of idle intra-op threads (default true, ONNX Runtime's own default). */
  spin?: boolean;
  /** Timed rounds (default 4). */
  rounds?: number;
  /** Runs per round, at least (default 4). */
  repeats?: number;
  /** Milliseconds a round lasts, at least: it adds runs past `repeats` until then (default 100; 0: exactly `repeats` runs). */
  minRoundMs?: number;
  /**
   * What the MatMul runs on (default: a @ulysses/kernels SessionCache, onnxruntime-node's path, with `threads` and `spin`): a
   * function given those settings that returns a session cache, released after the measurement, and optionally how a run's output
   * goes back to it for the next run to reuse (e.g. NativeSessionCache's `outputs.give`), so that no timed run faults in a fresh buffer.
   */
  cache?: (settings: { intraOpThreads: number; allowSpinning: boolean }) => RateCache;
}

/** A session cache for measureMatmulRate, and how an output goes back to it. */
export interface RateCache {
  cache: SessionCache;
  recycle?: (output: Tensor) => void;
}

/** How fastestRound times its rounds. */
export interface RoundOptions {
  /** Milliseconds a round lasts, at least: it adds calls past `repeats` until then (default 0: exactly `repeats` calls). */
  minRoundMs?: number;
  /** The clock, in ms (default performance.now). */
  now?: () => number;
}

/**
 * Seconds per call of the fastest round: `rounds` rounds of calls of `run`,
 * each of `repeats` calls, or more until the round has lasted `minRoundMs`;
 * a round's time is its mean per call.
 */
export async function fastestRound(run: () => Promise<unknown>, rounds: number, repeats: number, options: RoundOptions = {}): Promise<number> {
  const { minRoundMs = 0, now = () => performance.now() } = options;
  for (const [name, value] of [
    ["rounds", rounds],
    ["repeats", repeats],
  ] as const) {
    if (!Number.isInteger(value) || value < 1) throw new MeasureError(`${name} must be a positive integer, got ${value}`);
  }
  if (!Number.isFinite(minRoundMs) || minRoundMs < 0) throw new MeasureError(`minRoundMs must be a finite number >= 0, got ${minRoundMs}`);
  let best = Infinity;
  for (let round = 0; round < rounds; round++) {
    const started = now();
    let calls = 0;
    while (calls < repeats || now() - started < minRoundMs) {
      await run();
      calls++;
    }
    best = Math.min(best, (now() - started) / calls);
  }
  return best / 1000;
}

/** FLOP/s of an n × n × n float32 MatMul in ONNX Runtime (2n³ FLOPs per run; the fastest round). */
export async function measureMatmulRate(options: MatmulRateOptions = {}): Promise<number> {
  const threads = options.threads ?? os.availableParallelism();
  const n = options.size ?? 1024;
  if (!Number.isInteger(threads) || threads < 1) throw new MeasureError(`MatMul rate: threads must be a positive integer, got ${threads}`);
  if (!Number.isInteger(n) || n < 1) throw new MeasureError(`MatMul rate: size must be a positive integer, got ${n}`);
  const { GraphBuilder, SessionCache } = await import("@ulysses/kernels");
  const settings = { intraOpThreads: threads, allowSpinning: options.spin ?? true };
  const { cache, recycle } = options.cache?.(settings) ?? { cache: new SessionCache(settings) };
  try {
    const key = `matmul-rate-${n}`;
    const build = () => {
      const g = new GraphBuilder(key);
      const a = g.input("a", "float32", [n, n]);
      const b = g.input("b", "float32", [n, n]);
      g.output(g.op("MatMul", [a, b]), "c");
      return g.encode();
    };
    const feeds = { a: randomUniform([n, n], { seed: 1, low: -1, high: 1 }), b: randomUniform([n, n], { seed: 2, low: -1, high: 1 }) };
    const run = async () => {
      const { c } = await cache.run(key, build, feeds);
      if (c === undefined) throw new MeasureError(`MatMul rate: the cache's run of '${key}' returned no output 'c'`);
      recycle?.(c);
    };
    // the first run creates the session; the second is the first on a native cache's own path
    await run();
    await run();
    const seconds = await fastestRound(run, options.rounds ?? 4, options.repeats ?? 4, { minRoundMs: options.minRoundMs ?? 100 });
    return (2 * n ** 3) / seconds;
  } finally {
    await cache.release();
  }
}
