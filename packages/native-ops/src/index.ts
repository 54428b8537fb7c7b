/**
 * @ulysses/native-ops: native CPU kernels through a small N-API addon on ONNX Runtime: fused FlashAttention-style attention
 * as custom ops, FusedOps (OrtOps with native GELU, LayerNorm, rope, sums and AdamW), NativeSessionCache, glibc's malloc
 * settings, and createRankKernels (the ops and attention kernel of one training rank, with its memory regime).
 * Importing the package registers FusedAttention in @ulysses/kernels as attention implementation "fused".
 */
export { FusedAttentionError } from "./errors.js";
export { CALLER_THREAD_MAX_PAIRS, FusedAttention, fusedAttentionStatus, type FusedAttentionOptions, type CpuIsa } from "./fused-attention.js";
export { FusedOps, NATIVE_OPS, createFusedOps, type FusedOpsOptions } from "./fused-ops.js";
export { NativeSessionCache, nativeRateCache, OUTPUT_POOL_BYTES, type NativeSessionCacheOptions } from "./native-session-cache.js";
export { registerFusedAttention, FUSED_ATTENTION_NAME } from "./register.js";
export { attentionModel, CUSTOM_OP_DOMAIN, DOCUMENT_INPUTS, GRAPH_IO, type GraphKind } from "./model.js";
export { processSharedFloats, setMallocMmapThreshold, setMallocTrimThreshold, MALLOC_MMAP_THRESHOLD_MAX, type NativeInfo } from "./native.js";
export {
  createRankKernels,
  resolveKernel,
  usesNativeOps,
  MMAP_THRESHOLD_BYTES,
  RETAIN_HEAP_BYTES,
  type KernelChoice,
  type RankKernels,
} from "./rank-kernels.js";
