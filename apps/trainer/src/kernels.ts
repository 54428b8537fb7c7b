/**
 * The kernels one rank trains with: BlockOps and a local attention kernel
 * sharing one ONNX Runtime session cache with `threads` intra-op threads.
 */
import { OrtAttention, ReferenceOps, SessionCache, type BlockOps, type LocalAttention } from "@ulysses/kernels";

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
    ops: new ReferenceOps(),
    attention: new OrtAttention({ cache }),
    description: `ReferenceOps + OrtAttention (${threads} ORT thread${threads === 1 ? "" : "s"} per rank)`,
    release: () => cache.release(),
  };
}
