/**
 * One case of `pnpm bench:kernels`, run in its own child process so its peak
 * RSS (getrusage maxRSS) is its own: either ONNX Runtime's MatMul rate
 * (2048^3) or one attention configuration (forward, then forward+backward).
 * Prints one JSON line; the orchestrator (kernels-bench.ts) builds the table.
 *
 * FLOP convention ("useful" FLOPs, no recomputation counted; @ulysses/measure's
 * attentionFlops): forward 4·b·h·pairs·d, backward 8·b·h·pairs·d, where pairs
 * = the (query, key) pairs attended (seq² non-causal, seq(seq+1)/2 causal).
 * The MatMul rate is @ulysses/measure's measureMatmulRate (best of 5 single runs here, like the kernels' times), on
 * the fused-attention addon's NativeSessionCache with its output reused when the addon loads: ONNX Runtime's
 * kernel alone, as the trainer's MFU takes it, without onnxruntime-node's per-run output copy.
 */
import { type Tensor, randomUniform } from "@ulysses/tensors";
import { SessionCache, createAttention, type AttentionImplementation } from "@ulysses/kernels";
import { attentionFlops, fastestRound, measureMatmulRate } from "@ulysses/measure";
import { fusedAttentionStatus, nativeRateCache } from "@ulysses/native-ops"; // also registers attention implementation "fused"

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

/** The MatMul rate; the added RSS includes the two inputs. */
async function matmul(c: MatMulCase): Promise<CaseResult> {
  const baseline = process.memoryUsage().rss;
  const cache = fusedAttentionStatus().available ? nativeRateCache : undefined;
  const flopsPerSecond = await measureMatmulRate({ threads: c.threads, size: c.size, spin: c.spin, rounds: 5, repeats: 1, minRoundMs: 0, cache });
  const peakRss = process.resourceUsage().maxRSS * 1024;
  return { forwardSeconds: (2 * c.size ** 3) / flopsPerSecond, forwardGflops: flopsPerSecond / 1e9, peakRss, addedRss: peakRss - baseline };
}

async function attention(c: AttentionCase): Promise<CaseResult> {
  const cache = new SessionCache({ intraOpThreads: c.threads, allowSpinning: c.spin });
  const kernel = await createAttention({ implementation: c.implementation, cache, threads: c.threads });
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
  const shape = { seq: c.seq, width: c.heads * c.headDim, causal: c.causal };
  // the fastest of `repeats` single calls
  const forwardSeconds = await fastestRound(() => kernel.forward(q, k, v, options), c.repeats, 1);
  const totalSeconds = await fastestRound(
    async () => {
      const f = await kernel.forward(q, k, v, options);
      await kernel.backward(q, k, v, f.out, dOut, f.logSumExp, options);
    },
    c.repeats,
    1,
  );
  const peakRss = process.resourceUsage().maxRSS * 1024;
  return {
    forwardSeconds,
    forwardGflops: attentionFlops(shape) / forwardSeconds / 1e9,
    totalSeconds,
    totalGflops: attentionFlops(shape, "training") / totalSeconds / 1e9,
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
