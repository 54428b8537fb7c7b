/**
 * The kernels one training rank uses: its TrainingOps and a local attention
 * kernel. Ops run as ONNX graphs in one session cache with `threads` intra-op
 * threads; attention is the fused custom op (faster in `pnpm bench:kernels`)
 * or OrtAttention. "auto" picks fused when the addon is built and says which
 * it used; with fused on an AVX2 or AVX-512 processor, GELU, LayerNorm and
 * rope run as the addon's native kernels too (FusedOps). The memory regime
 * (arenas and glibc's heap kept, or freed memory returned) is set here too.
 */
import {
  ARENA_HEAP_GROWING_PERCENT,
  COLLECT_GARBAGE_EVERY_BYTES,
  SessionCache,
  createAttention,
  createOrtOps,
  setHeapGrowingPercent,
  type LocalAttention,
  type TrainingOps,
} from "@ulysses/kernels";
import { FusedAttentionError } from "./errors.js";
import { fusedAttentionStatus } from "./fused-attention.js";
import { createFusedOps } from "./fused-ops.js";
import { NativeSessionCache } from "./native-session-cache.js";
import { MALLOC_MMAP_THRESHOLD_MAX, setMallocMmapThreshold, setMallocTrimThreshold } from "./native.js";
import "./register.js"; // registers attention implementation "fused"

/** The kernel choice: auto (fused when the addon is built, else ort) | fused | ort. */
export type KernelChoice = "auto" | "fused" | "ort";

export interface RankKernels {
  ops: TrainingOps;
  attention: LocalAttention;
  /** Human-readable names, for the run header. */
  description: string;
  /** Whether FusedOps' native elementwise kernels run (else every op is an ONNX Runtime graph). */
  nativeOps: boolean;
  release(): Promise<void>;
}

/** The attention kernel "auto" resolves to on this machine, with the reason. */
export function resolveKernel(kernel: KernelChoice): { kernel: "fused" | "ort"; note: string } {
  if (kernel === "ort") return { kernel, note: "" };
  const status = fusedAttentionStatus();
  if (status.available) return { kernel: "fused", note: "" };
  if (kernel === "fused") throw new FusedAttentionError(`--kernel fused: the fused attention addon is not available: ${status.reason}`);
  return { kernel: "ort", note: ` (fused attention unavailable: ${status.reason.split("\n")[0]})` };
}

/**
 * Whether a run with this --kernel setting uses FusedOps (GELU, LayerNorm, rope, the block's sums and AdamW as the addon's native
 * kernels): the fused kernel on an AVX2 or AVX-512 processor. Their portable build is slower than ONNX Runtime's Gelu, so not there.
 */
export function usesNativeOps(kernel: KernelChoice): boolean {
  if (kernel === "ort") return false;
  const status = fusedAttentionStatus();
  return status.available && status.info.cpuIsa !== "portable";
}

/** glibc's mmap threshold without arenas (128 KiB, glibc's own starting value, kept fixed): see setMallocMmapThreshold. */
export const MMAP_THRESHOLD_BYTES = 128 * 1024;

/**
 * glibc's trim threshold with --memory-arena: the free memory at the top of a heap it keeps instead of returning to the OS (the most mallopt
 * takes: never trim), so the buffers a step frees are reused by the next without page faults (see setMallocTrimThreshold).
 */
export const RETAIN_HEAP_BYTES = 2 ** 31 - 1;

/**
 * The ops and attention kernel of one rank with `threads` intra-op threads; `memoryArena` keeps ONNX Runtime's arenas, glibc's heap
 * and a lazier V8 (fast), else freed memory goes back to the OS and V8 collects every COLLECT_GARBAGE_EVERY_BYTES of outputs.
 */
export async function createRankKernels(threads: number, kernel: KernelChoice = "auto", memoryArena = false): Promise<RankKernels> {
  const chosen = resolveKernel(kernel);
  if (memoryArena) {
    // glibc's heap keeps what a step frees (up to 32 MiB a buffer): the next step reuses those pages instead of faulting in new ones
    setMallocMmapThreshold(MALLOC_MMAP_THRESHOLD_MAX);
    setMallocTrimThreshold(RETAIN_HEAP_BYTES);
    // and V8 runs a full collection when its small heap has grown 10x (see ARENA_HEAP_GROWING_PERCENT), not every few MiB of wrappers
    setHeapGrowingPercent(ARENA_HEAP_GROWING_PERCENT);
  } else {
    // freed activations go back to the OS (about 35 KiB per token of peak RSS at hidden 256, docs/results/memory)
    setMallocMmapThreshold(MMAP_THRESHOLD_BYTES);
    setHeapGrowingPercent(0);
  }
  // Unless --memory-arena: freed tensors collected every 16 MiB of outputs, so the peak is the live tensors' plus at most that much garbage
  const cacheOptions = { intraOpThreads: threads, memoryArena, collectGarbageEvery: memoryArena ? 0 : COLLECT_GARBAGE_EVERY_BYTES };
  const fused = chosen.kernel === "fused";
  // With the addon, the op graphs run through it after their first run, into output arrays ONNX Runtime writes directly
  // (onnxruntime-node copies every output into a fresh zero-filled one)
  const cache = fused ? new NativeSessionCache(cacheOptions) : new SessionCache(cacheOptions);
  const attention = await createAttention({ implementation: fused ? "fused" : "ort", cache });
  const threadNote = `${threads} thread${threads === 1 ? "" : "s"} per rank`;
  // With the addon on an AVX2 or AVX-512 processor, GELU, LayerNorm and rope (forward and backward) also run natively (single-pass
  // kernels instead of ONNX Runtime's graphs of elementwise nodes)
  const nativeOps = usesNativeOps(kernel); // implies fused: resolveKernel chose the addon
  const name = `OrtOps${fused ? " (graphs run by the addon)" : ""}${nativeOps ? " + native GELU, LayerNorm, rope and cross-entropy" : ""} + ${fused ? "FusedAttention (C++ custom op)" : "OrtAttention"}`;
  return {
    ops: nativeOps ? createFusedOps(cache) : createOrtOps(cache),
    attention,
    description: `${name}${chosen.note} (${threadNote})`,
    nativeOps,
    release: async () => {
      await attention.release();
      await cache.release();
    },
  };
}
