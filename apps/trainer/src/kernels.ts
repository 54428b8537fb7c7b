/**
 * The kernels one rank trains with: BlockOps and a local attention kernel.
 * Ops run as ONNX graphs in one ONNX Runtime session cache with `threads`
 * intra-op threads; attention is the fused custom op of
 * @ulysses/fused-attention (faster in `pnpm bench:kernels`) or OrtAttention.
 * "auto" picks fused when its native addon is built and says which it used;
 * with fused on an AVX2 or AVX-512 processor, GELU, LayerNorm and rope run as
 * the addon's native kernels too (FusedOps).
 * Importing @ulysses/fused-attention registers "fused" with createAttention.
 */
import "@ulysses/fused-attention"; // registers attention implementation "fused"
import {
  NATIVE_OPS,
  createFusedOps,
  fusedAttentionStatus,
  MALLOC_MMAP_THRESHOLD_MAX,
  NativeSessionCache,
  nativeRateCache,
  setMallocMmapThreshold,
  setMallocTrimThreshold,
} from "@ulysses/fused-attention";
import { blockConfigOf, elementwiseOpsOf, type GptConfig } from "@ulysses/model";
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
import type { MatmulRateOptions } from "@ulysses/measure";
import type { TrainConfig } from "./config.js";
import { TrainerError } from "./errors.js";

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
export function resolveKernel(kernel: TrainConfig["kernel"]): { kernel: "fused" | "ort"; note: string } {
  if (kernel === "ort") return { kernel, note: "" };
  const status = fusedAttentionStatus();
  if (status.available) return { kernel: "fused", note: "" };
  if (kernel === "fused") throw new TrainerError(`--kernel fused: the fused attention addon is not available: ${status.reason}`);
  return { kernel: "ort", note: ` (fused attention unavailable: ${status.reason.split("\n")[0]})` };
}

/**
 * Whether a run with this --kernel setting uses FusedOps (GELU, LayerNorm, rope, the block's sums and AdamW as the addon's native
 * kernels): the fused kernel on an AVX2 or AVX-512 processor. Their portable build is slower than ONNX Runtime's Gelu, so not there.
 */
export function usesNativeOps(kernel: TrainConfig["kernel"]): boolean {
  if (kernel === "ort") return false;
  const status = fusedAttentionStatus();
  return status.available && status.info.cpuIsa !== "portable";
}

/**
 * The header's note on the elementwise ops of `model` (its norm, activation
 * and RoPE) that run as ONNX Runtime graphs although the run has native
 * kernels for others (e.g. RMSNorm or SwiGLU beside native LayerNorm and
 * GELU); empty when none does or no native kernels run.
 */
export function slowerPathNote(model: GptConfig, nativeOps: boolean): string {
  if (!nativeOps) return "";
  const slower = [...new Set<string>(elementwiseOpsOf(blockConfigOf(model)))].filter((op) => !NATIVE_OPS.has(op));
  return slower.length === 0 ? "" : `; slower path (ONNX Runtime graphs, no native kernel): ${slower.join(", ")}`;
}

/**
 * Where the trainer measures the MatMul rate, its MFU's denominator: ONNX Runtime's MatMul kernel on the addon's path (a
 * NativeSessionCache, outputs reused) whenever the addon loads, whatever kernels the run itself uses; else onnxruntime-node, whose
 * per-run output allocation and copy count in the rate (measured lower: docs/results/memory/calibration.md), so the MFU reads high. `path` says which, for the run header.
 */
export function matmulRateCache(): { cache: MatmulRateOptions["cache"]; path: string } {
  const status = fusedAttentionStatus();
  if (!status.available) return { cache: undefined, path: "through onnxruntime-node, whose output copies count: the MFU reads high" };
  return { cache: nativeRateCache, path: "on the addon's path" };
}

/** glibc's mmap threshold the trainer sets (128 KiB, glibc's own starting value, kept fixed): see setMallocMmapThreshold. */
export const MMAP_THRESHOLD_BYTES = 128 * 1024;

/**
 * glibc's trim threshold with --memory-arena: the free memory at the top of a heap it keeps instead of returning to the OS (the most mallopt
 * takes: never trim), so the buffers a step frees are reused by the next without page faults (see setMallocTrimThreshold).
 */
export const RETAIN_HEAP_BYTES = 2 ** 31 - 1;

export async function createRankKernels(threads: number, kernel: TrainConfig["kernel"] = "auto", memoryArena = false): Promise<RankKernels> {
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
  const name = `OrtOps${fused ? " (graphs run by the addon)" : ""}${nativeOps ? " + native GELU, LayerNorm and rope" : ""} + ${fused ? "FusedAttention (C++ custom op)" : "OrtAttention"}`;
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
