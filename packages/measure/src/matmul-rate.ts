/**
 * The MatMul rate of this machine: FLOP/s of an n × n × n float32 MatMul in
 * ONNX Runtime (@ulysses/kernels' SessionCache), the denominator of the
 * trainer's MFU and the reference of the kernel benchmarks. One untimed run
 * creates the session; then `rounds` rounds of `repeats` back-to-back runs
 * are timed and the fastest round's mean counts (on a shared machine other
 * work only ever slows a round down). onnxruntime-node is loaded on the first
 * call, not on import, so the package's arithmetic needs no ONNX Runtime.
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
  /** Timed rounds (default 8). */
  rounds?: number;
  /** Runs per round (default 4). */
  repeats?: number;
}

/** Seconds of the fastest round: `rounds` rounds of `repeats` calls of `run`, each round's mean per call. `now` is in ms. */
export async function fastestRound(run: () => Promise<unknown>, rounds: number, repeats: number, now: () => number = () => performance.now()): Promise<number> {
  for (const [name, value] of [
    ["rounds", rounds],
    ["repeats", repeats],
  ] as const) {
    if (!Number.isInteger(value) || value < 1) throw new MeasureError(`${name} must be a positive integer, got ${value}`);
  }
  let best = Infinity;
  for (let round = 0; round < rounds; round++) {
    const started = now();
    for (let r = 0; r < repeats; r++) await run();
    best = Math.min(best, (now() - started) / repeats);
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
    const seconds = await fastestRound(run, options.rounds ?? 8, options.repeats ?? 4);
    return (2 * n ** 3) / seconds;
  } finally {
    await cache.release();
  }
}
