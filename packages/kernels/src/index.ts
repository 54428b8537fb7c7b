/** @ulysses/kernels: ONNX graphs run by onnxruntime-node. No communication inside. */
export { KernelError } from "./errors.js";
export { GraphBuilder, attr, decodeModel, type Value, type Dim, type Attribute, type ElementType } from "./graph/builder.js";
export { SessionCache, defaultIntraOpThreads, assertCudaAvailable, type RuntimeOptions, type ExecutionProvider } from "./runtime/session-cache.js";
export type { LocalAttention, AttentionOptions, AttentionForwardResult, AttentionGradients } from "./attention/types.js";
export type { BlockOps, LayerNormSaved, CrossEntropyResult } from "./ops/types.js";
export { ReferenceAttention, referenceForward64, referenceBackward64, type Forward64, type Gradients64 } from "./reference/attention.js";
export { attentionDims, type AttentionDims } from "./attention/shapes.js";
