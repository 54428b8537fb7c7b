/**
 * The block's forward GEMMs at its shapes as one ONNX graph (q, k, v, o:
 * [rows, h] x [h, h]; MLP up [rows, h] x [h, 4h]; down [rows, 4h] x [4h, h]):
 * 24·rows·h² FLOPs, the cost model's matmul term per token. Timed by the
 * kernel-rate child (rates-case.ts) and by the ranks themselves
 * (paper-rank.ts, every rank at once).
 */
import { GraphBuilder, type SessionCache } from "@ulysses/kernels";
import { matmulFlopsPerToken } from "@ulysses/measure";
import { randomUniform, type Tensor } from "@ulysses/tensors";

/** Untimed calls of `run`: at least `runs` of them and `ms` milliseconds. */
export async function warmUp(run: () => Promise<unknown>, runs: number, ms: number): Promise<void> {
  const start = performance.now();
  for (let i = 0; i < runs || performance.now() - start < ms; i++) await run();
}

/** Seconds of each of `repeats` calls of `run`, every rank of `group` starting each one together (a barrier first). */
export async function timedRepeats(group: { barrier(): Promise<unknown> }, repeats: number, run: () => Promise<unknown>): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < repeats; i++) {
    await group.barrier();
    const t0 = performance.now();
    await run();
    times.push((performance.now() - t0) / 1000);
  }
  return times;
}

export interface BlockGemm {
  /** FLOPs of one run. */
  flops: number;
  run(): Promise<unknown>;
  /** Untimed runs: the first ones are up to 2.5x slower (buffers growing, pages faulting in), so at least 3 runs and 1 s. */
  warm(): Promise<void>;
}

/** FLOPs of the block's forward GEMMs over `rows` tokens: @ulysses/measure's matrix count of one layer without vocabulary (24·rows·h²). */
export function blockGemmFlops(rows: number, hidden: number): number {
  return rows * matmulFlopsPerToken({ layers: 1, hidden, vocab: 0, mlpHidden: 4 * hidden });
}

export function blockGemm(cache: SessionCache, rows: number, hidden: number): BlockGemm {
  const h = hidden;
  const key = `paper-gemm-${rows}-${h}`;
  const build = () => {
    const g = new GraphBuilder(key);
    const x = g.input("x", "float32", [rows, h]);
    const square = g.input("square", "float32", [h, h]);
    const up = g.input("up", "float32", [h, 4 * h]);
    const down = g.input("down", "float32", [4 * h, h]);
    const outs = [0, 1, 2, 3].map(() => g.op("MatMul", [x, square]));
    const hiddenAct = g.op("MatMul", [x, up]);
    const y = g.op("MatMul", [hiddenAct, down]);
    outs.forEach((o, i) => g.output(o, `o${i}`));
    g.output(y, "y");
    return g.encode();
  };
  const feeds: Record<string, Tensor> = {
    x: randomUniform([rows, h], { seed: 1, low: -1, high: 1 }),
    square: randomUniform([h, h], { seed: 2, low: -1, high: 1 }),
    up: randomUniform([h, 4 * h], { seed: 3, low: -1, high: 1 }),
    down: randomUniform([4 * h, h], { seed: 4, low: -1, high: 1 }),
  };
  const run = () => cache.run(key, build, feeds);
  return { flops: blockGemmFlops(rows, h), run, warm: () => warmUp(run, 3, 1000) };
}
