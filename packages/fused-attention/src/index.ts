/**
 * @ulysses/fused-attention: fused FlashAttention-style attention as ONNX Runtime custom ops,
 * and FusedOps (OrtOps with native GELU, LayerNorm and rope kernels).
 * Importing the package registers FusedAttention in @ulysses/kernels as attention implementation "fused".
 */
export { FusedAttentionError } from "./errors.js";
export { CALLER_THREAD_MAX_PAIRS, FusedAttention, fusedAttentionStatus, type FusedAttentionOptions, type CpuIsa } from "./fused-attention.js";
export { FusedOps, NATIVE_OPS, createFusedOps, type FusedOpsOptions } from "./fused-ops.js";
export { NativeSessionCache, nativeRateCache, OUTPUT_POOL_BYTES, type NativeSessionCacheOptions } from "./native-session-cache.js";
export { registerFusedAttention, FUSED_ATTENTION_NAME } from "./register.js";
export { attentionModel, CUSTOM_OP_DOMAIN, DOCUMENT_INPUTS, GRAPH_IO, type GraphKind } from "./model.js";
export { setMallocMmapThreshold, setMallocTrimThreshold, MALLOC_MMAP_THRESHOLD_MAX, type NativeInfo } from "./native.js";
