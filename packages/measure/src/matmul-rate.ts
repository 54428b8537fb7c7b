/**
 * The MatMul rate of this machine: FLOP/s of an n × n × n float32 MatMul in
 * ONNX Runtime (@ulysses/kernels' SessionCache), the denominator of the
 * trainer's MFU and the reference of the kernel benchmarks. One untimed run
 * creates the session; then `rounds` rounds of back-to-back runs are timed,
 * each at least `repeats` runs and `minRoundMs` long, and the fastest round's
 * mean counts (on a shared machine other work only ever slows a round down).
 *
 * Rounds last at least 100 ms by default because the rate a machine holds
 * depends on how long it is asked to: on the 2-core AVX-512 VM of
 * docs/results/memory (2026-12-04, n = 1024, 2 threads, four alternations),
 * the fastest of 8 rounds of 4 runs (about 28 ms each) gave 320-325 GFLOP/s,
 * while rounds of 112 ms gave 290-302, of 450 ms 294-299 and of 900 ms
 * 288-296: a short round catches a burst (a clock boost, or the luckiest of
 * many noisy samples) that no 100 ms of work sees again. A training step
 * runs for hundreds of ms, so its MFU is taken against the rate the machine
 * sustains for that long, not against the burst. onnxruntime-node is loaded
 * on the first call, not on import, so the package's arithmetic needs no
 * ONNX Runtime.
 */
import os from "node:os";
import { randomUniform } from "@ulysses/tensors";
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
  const cache = new SessionCache({ intraOpThreads: threads, allowSpinning: options.spin ?? true });
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
    const run = () => cache.run(key, build, feeds);
    await run();
    const seconds = await fastestRound(run, options.rounds ?? 4, options.repeats ?? 4, { minRoundMs: options.minRoundMs ?? 100 });
    return (2 * n ** 3) / seconds;
  } finally {
    await cache.release();
  }
}
