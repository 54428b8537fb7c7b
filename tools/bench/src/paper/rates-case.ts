/**
 * The kernel rates `bench:paper` measures, each in its own child process
 * (run as `node ... rates-case.ts '<json>'`, prints one JSON line):
 *
 * - `matmul`, `attention`: bench:kernels' own cases (kernels-bench-case.ts):
 *   ONNX Runtime's square MatMul rate and attention forward+backward in useful
 *   GFLOP/s (12·h·pairs·d, causal pairs = N(N+1)/2).
 * - `gemm`: the block's forward GEMMs at its shapes (block-gemm.ts), one
 *   thread alone.
 */
import { SessionCache } from "@ulysses/kernels";
import { fastestRound } from "@ulysses/measure";
import { runCase, type BenchCase } from "../kernels-bench-case.js";
import { blockGemm } from "./block-gemm.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

export interface GemmCase {
  kind: "gemm";
  threads: number;
  rows: number;
  hidden: number;
  repeats: number;
}

export type RateCase = BenchCase | GemmCase;

async function gemm(c: GemmCase): Promise<{ forwardGflops: number; forwardSeconds: number }> {
  // one session timed in a loop: spinning as ONNX Runtime does by default (SessionCache's default is off)
  const cache = new SessionCache({ intraOpThreads: c.threads, allowSpinning: true });
  const g = blockGemm(cache, c.rows, c.hidden);
  await g.warm();
  const seconds = await fastestRound(() => g.run(), c.repeats, 1); // the fastest single run
  await cache.release();
  return { forwardGflops: g.flops / seconds / 1e9, forwardSeconds: seconds };
}

const raw = process.argv.at(-1);
if (raw === undefined || !raw.startsWith("{")) throw new Error(`rates-case.ts: expected a JSON case as the last argument, got '${raw}'`);
const c = JSON.parse(raw) as RateCase;
if (c.kind === "gemm") console.log(JSON.stringify(await gemm(c)));
else await runCase(c);
