/** @ulysses/kernels: ONNX graphs run by onnxruntime-node. No communication inside. */
export { KernelError } from "./errors.js";
export { GraphBuilder, attr, type Value, type Dim, type Attribute, type ElementType, type OpOptions } from "./graph/builder.js";
export {
  decodeModel,
  type DecodedModel,
  type DecodedGraph,
  type DecodedNode,
  type DecodedAttribute,
  type DecodedValueInfo,
  type DecodedDim,
  type DecodedTensor,
} from "./graph/decode.js";
export { GarbageCollector, setHeapGrowingPercent, MAX_HEAP_GROWING_PERCENT } from "./runtime/garbage-collector.js";
export { BufferPool, type BufferPoolOptions } from "./runtime/buffer-pool.js";
export { SessionCache, defaultIntraOpThreads, assertCudaAvailable, type RuntimeOptions, type ExecutionProvider } from "./runtime/session-cache.js";
export type { LocalAttention, AttentionOptions, AttentionDocuments, AttentionForwardResult, AttentionGradients } from "./attention/types.js";
export type { AdamWUpdate, BlockOps, LayerNormSaved, CrossEntropyResult, RopePositions } from "./ops/types.js";
export { ReferenceAttention, referenceForward64, referenceBackward64, type Forward64, type Gradients64 } from "./reference/attention.js";
export { StatsReferenceAttention } from "./reference/stats-attention.js";
export { attentionDims, checkBackwardShapes, type AttentionDims, type AttentionErrorFactory } from "./attention/shapes.js";
export { documentRanges, keySpan, tileVisibility, type KeyRanges, type KeySpan, type TileVisibility } from "./attention/documents.js";
export { ReferenceOps, PoisoningOps, DEFAULT_ROPE_BASE } from "./reference/ops.js";
export { toFloat64, toFloat32, type Real, type F64 } from "./reference/float64.js";
export { linearForward64, linearBackward64 } from "./reference/linear.js";
export { layerNormForward64, layerNormBackward64, rmsNormForward64, rmsNormBackward64 } from "./reference/norms.js";
export { geluScalar, geluDerivative, geluForward64, geluBackward64, swigluForward64, swigluBackward64, GELU_C, GELU_K } from "./reference/activations.js";
export { ropeAngle, ropeRotate64 } from "./reference/rope.js";
export { embeddingForward64, embeddingBackward64, crossEntropyForward64, crossEntropyBackward64, DEFAULT_IGNORE_INDEX } from "./reference/embedding-loss.js";
export { seededRandom, randomTensor, randomTensor64, maxRelativeError, numericalGradient, dot } from "./reference/testing.js";
export { OrtAttention, type OrtAttentionOptions } from "./attention/ort-attention.js";
export { OrtOps, createOrtOps } from "./ops/ort-ops.js";
export { Tape, type TapeValue, type TapeNode } from "./graph/gradients-tape.js";
export { gradients, registerGradient, getGradient, registeredGradients, unbroadcast, type GradientRule } from "./graph/gradients.js";
export {
  createAttention,
  registerAttention,
  attentionImplementations,
  type AttentionImplementation,
  type AttentionFactory,
  type AttentionFactoryOptions,
  type CreateAttentionOptions,
} from "./attention/registry.js";
