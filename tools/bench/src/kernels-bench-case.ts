/**
 * One case of `pnpm bench:kernels`, run in its own child process so its peak
 * RSS (getrusage maxRSS) is its own: either ONNX Runtime's MatMul rate
 * (2048^3) or one attention configuration (forward, then forward+backward).
 * Prints one JSON line; the orchestrator (kernels-bench.ts) builds the table.
 *
 * FLOP convention ("useful" FLOPs, no recomputation counted): forward
 * 4·b·h·pairs·d, backward 8·b·h·pairs·d, where pairs = the (query, key) pairs
 * attended (seqQ·seqK non-causal, about half of that causal).
 */
import { Tensor, randomUniform } from "@ulysses/tensors";
import { GraphBuilder, SessionCache, createAttention, type AttentionImplementation } from "@ulysses/kernels";

export interface MatMulCase {
  kind: "matmul";
  threads: number;
  /** ONNX Runtime's idle-thread spinning (its default) or not. */
  spin: boolean;
  size: number;
}

export interface AttentionCase {
  kind: "attention";
  threads: number;
  implementation: AttentionImplementation;
  spin: boolean;
  seq: number;
  heads: number;
  headDim: number;
  causal: boolean;
  /** Timed repetitions (the best is kept); a small warm-up run creates the sessions first. */
  repeats: number;
}

export type BenchCase = MatMulCase | AttentionCase;

export interface CaseResult {
  /** Seconds of the timed forward (attention) or MatMul. */
  forwardSeconds: number;
  forwardGflops: number;
  /** Seconds of forward + backward (attention only). */
  totalSeconds?: number;
  totalGflops?: number;
  /** Peak RSS of the child process, bytes. */
  peakRss: number;
  /** Peak RSS minus the RSS after the inputs were created, bytes. */
  addedRss: number;
}

function cpuSeconds(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

/** The fastest of `repeats` timed calls of `run`, seconds. */
export async function best(repeats: number, run: () => Promise<unknown>): Promise<number> {
  let fastest = Infinity;
  for (let i = 0; i < repeats; i++) {
    const start = performance.now();
    await run();
    fastest = Math.min(fastest, (performance.now() - start) / 1e3);
  }
  return fastest;
}

async function matmul(c: MatMulCase): Promise<CaseResult> {
  const cache = new SessionCache({ intraOpThreads: c.threads, allowSpinning: c.spin });
  const n = c.size;
  const build = () => {
    const g = new GraphBuilder(`matmul${n}`);
    const a = g.input("a", "float32", [n, n]);
    const b = g.input("b", "float32", [n, n]);
    g.output(g.op("MatMul", [a, b]), "c");
    return g.encode();
  };
  const a = randomUniform([n, n], { seed: 1, low: -1, high: 1 }) as Tensor<"float32">;
  const b = randomUniform([n, n], { seed: 2, low: -1, high: 1 }) as Tensor<"float32">;
  const baseline = process.memoryUsage().rss;
  await cache.run("matmul", build, { a, b });
  const seconds = await best(5, () => cache.run("matmul", build, { a, b }));
  const peakRss = process.resourceUsage().maxRSS * 1024;
  return { forwardSeconds: seconds, forwardGflops: (2 * n ** 3) / seconds / 1e9, peakRss, addedRss: peakRss - baseline };
}

/** (query, key) pairs attended: seq² non-causal, seq(seq+1)/2 causal. */
export function attendedPairs(seq: number, causal: boolean): number {
  return causal ? (seq * (seq + 1)) / 2 : seq * seq;
}

async function attention(c: AttentionCase): Promise<CaseResult> {
  const cache = new SessionCache({ intraOpThreads: c.threads, allowSpinning: c.spin });
  const kernel = await createAttention({ implementation: c.implementation, cache, threads: c.threads, load: () => import("@ulysses/fused-attention") });
  const options = { causal: c.causal };
  const make = (seq: number, seed: number) => randomUniform([1, seq, c.heads, c.headDim], { seed, low: -1, high: 1 }) as Tensor<"float32">;
  // Warm-up on a short sequence: creates every session shape the long run uses.
  const warm = Math.min(c.seq, 1024);
  const [wq, wk, wv, wd] = [1, 2, 3, 4].map((seed) => make(warm, seed)) as [Tensor<"float32">, Tensor<"float32">, Tensor<"float32">, Tensor<"float32">];
  const wf = await kernel.forward(wq, wk, wv, options);
  await kernel.backward(wq, wk, wv, wf.out, wd, wf.logSumExp, options);
  const [q, k, v, dOut] = [5, 6, 7, 8].map((seed) => make(c.seq, seed)) as [Tensor<"float32">, Tensor<"float32">, Tensor<"float32">, Tensor<"float32">];
  globalThis.gc?.();
  const baseline = process.memoryUsage().rss;
  const flops = c.heads * attendedPairs(c.seq, c.causal) * c.headDim;
  const forwardSeconds = await best(c.repeats, () => kernel.forward(q, k, v, options));
  const totalSeconds = await best(c.repeats, async () => {
    const f = await kernel.forward(q, k, v, options);
    await kernel.backward(q, k, v, f.out, dOut, f.logSumExp, options);
  });
  const peakRss = process.resourceUsage().maxRSS * 1024;
  return {
    forwardSeconds,
    forwardGflops: (4 * flops) / forwardSeconds / 1e9,
    totalSeconds,
    totalGflops: (12 * flops) / totalSeconds / 1e9,
    peakRss,
    addedRss: peakRss - baseline,
  };
}

/** Runs `c` and prints its result as one JSON line (with the CPU seconds used). */
export async function runCase(c: BenchCase): Promise<void> {
  const cpuStart = cpuSeconds();
  const result = c.kind === "matmul" ? await matmul(c) : await attention(c);
  console.log(JSON.stringify({ ...result, cpuSeconds: cpuSeconds() - cpuStart }));
}
