/**
 * The kernels one rank trains with: BlockOps and a local attention kernel
 * sharing one ONNX Runtime session cache with `threads` intra-op threads.
 */
import { OrtAttention, SessionCache, createOrtOps, type BlockOps, type LocalAttention } from "@ulysses/kernels";

export interface RankKernels {
  ops: BlockOps;
  attention: LocalAttention;
  /** Human-readable names, for the run header. */
  description: string;
  release(): Promise<void>;
}

export function createRankKernels(threads: number): RankKernels {
  const cache = new SessionCache({ intraOpThreads: threads });
  return {
    ops: createOrtOps(cache),
    attention: new OrtAttention({ cache }),
    description: `OrtOps + OrtAttention (${threads} ORT thread${threads === 1 ? "" : "s"} per rank)`,
    release: () => cache.release(),
  };
}
