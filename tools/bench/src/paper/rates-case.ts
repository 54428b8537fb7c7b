/**
 * The kernel rates `bench:paper` measures, each in its own child process
 * (run as `node ... rates-case.ts '<json>'`, prints one JSON line):
 *
 * - `matmul`, `attention`: bench:kernels' own cases (kernels-bench-case.ts):
 *   ONNX Runtime's square MatMul rate and attention forward+backward in useful
 *   GFLOP/s (12·h·pairs·d, causal pairs = N(N+1)/2).
 * - `gemm`: the block's forward GEMMs at its shapes (q, k, v, o: [rows, h] x
 *   [h, h]; MLP up [rows, h] x [h, 4h]; down [rows, 4h] x [4h, h]) in one
 *   graph: 24·rows·h² FLOPs, the cost model's matmul term per token.
 */
import { GraphBuilder, SessionCache } from "@ulysses/kernels";
import { randomUniform, type Tensor } from "@ulysses/tensors";
import { runCase, type BenchCase } from "../kernels-bench-case.js";

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
  const cache = new SessionCache({ intraOpThreads: c.threads });
  const h = c.hidden;
  const key = `paper-gemm-${c.rows}-${h}`;
  const build = () => {
    const g = new GraphBuilder(key);
    const x = g.input("x", "float32", [c.rows, h]);
    const square = g.input("square", "float32", [h, h]);
    const up = g.input("up", "float32", [h, 4 * h]);
    const down = g.input("down", "float32", [4 * h, h]);
    // [rows, h] x [h, h] four times (q, k, v, o), then the MLP.
    const outs = [0, 1, 2, 3].map(() => g.op("MatMul", [x, square]));
    const hidden = g.op("MatMul", [x, up]);
    const y = g.op("MatMul", [hidden, down]);
    outs.forEach((o, i) => g.output(o, `o${i}`));
    g.output(y, "y");
    return g.encode();
  };
  const feeds: Record<string, Tensor> = {
    x: randomUniform([c.rows, h], { seed: 1, low: -1, high: 1 }),
    square: randomUniform([h, h], { seed: 2, low: -1, high: 1 }),
    up: randomUniform([h, 4 * h], { seed: 3, low: -1, high: 1 }),
    down: randomUniform([4 * h, h], { seed: 4, low: -1, high: 1 }),
  };
  await cache.run(key, build, feeds);
  let best = Infinity;
  for (let i = 0; i < c.repeats; i++) {
    const t0 = performance.now();
    await cache.run(key, build, feeds);
    best = Math.min(best, (performance.now() - t0) / 1000);
  }
  await cache.release();
  return { forwardGflops: (24 * c.rows * h * h) / best / 1e9, forwardSeconds: best };
}

const raw = process.argv.at(-1);
if (raw === undefined || !raw.startsWith("{")) throw new Error(`rates-case.ts: expected a JSON case as the last argument, got '${raw}'`);
const c = JSON.parse(raw) as RateCase;
if (c.kind === "gemm") console.log(JSON.stringify(await gemm(c)));
else await runCase(c);
