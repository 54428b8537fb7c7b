/** @ulysses/fused-attention: fused FlashAttention-style attention as ONNX Runtime custom ops. */
export { FusedAttentionError } from "./errors.js";
export { FusedAttention, fusedAttentionStatus, type FusedAttentionOptions, type CpuIsa, type FusedAttentionCallOptions } from "./fused-attention.js";
export { attentionModel, CUSTOM_OP_DOMAIN, GRAPH_IO, type GraphKind } from "./model.js";
export type { NativeInfo } from "./native.js";
