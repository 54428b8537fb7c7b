/**
 * Model FLOPs utilisation: the model's FLOPs per step (6 per weight of every
 * matrix per token, as PaLM counts, plus causal attention: PaLM's
 * 12 * layers * hidden * seq per token for scores and values, halved because
 * a causal kernel only computes the lower triangle) against the rate ONNX
 * Runtime's MatMul reaches on this machine, measured once at start-up with
 * all cores (on a loaded machine that rate is low and the MFU optimistic).
 */
import os from "node:os";
import { GraphBuilder, SessionCache } from "@ulysses/kernels";
import { gptParamSpecs, type GptConfig } from "@ulysses/model";
import { Tensor } from "@ulysses/tensors";

/** FLOPs of one training step (forward and backward) over `tokens` tokens of sequences of `seq`. */
export function modelFlopsPerStep(config: GptConfig, tokens: number, seq: number): number {
  let matrixWeights = config.tiedHead ? config.hidden * config.vocab : 0;
  for (const spec of gptParamSpecs(config)) if (spec.shape.length === 2 && spec.name !== "embed.weight") matrixWeights += spec.shape[0]! * spec.shape[1]!;
  return tokens * (6 * matrixWeights + 6 * config.layers * config.hidden * seq);
}

/** FLOP/s of an n x n x n float32 MatMul in ONNX Runtime with `threads` threads (best of a few runs). */
export async function measureMatmulRate(threads = os.availableParallelism(), n = 1024): Promise<number> {
  const cache = new SessionCache({ intraOpThreads: threads });
  try {
    const build = () => {
      const g = new GraphBuilder("matmul-rate");
      const a = g.input("a", "float32", [n, n]);
      const b = g.input("b", "float32", [n, n]);
      g.output(g.op("MatMul", [a, b]), "c");
      return g.encode();
    };
    const a = new Tensor("float32", [n, n]);
    const b = new Tensor("float32", [n, n]);
    for (let i = 0; i < a.size; i++) {
      a.data[i] = ((i * 7) % 13) / 13;
      b.data[i] = ((i * 5) % 11) / 11;
    }
    await cache.run(`matmul-rate-${n}`, build, { a, b });
    let best = Infinity;
    for (let round = 0; round < 8; round++) {
      const reps = 4;
      const started = performance.now();
      for (let r = 0; r < reps; r++) await cache.run(`matmul-rate-${n}`, build, { a, b });
      best = Math.min(best, (performance.now() - started) / reps);
    }
    return (2 * n * n * n) / (best / 1000);
  } finally {
    await cache.release();
  }
}
