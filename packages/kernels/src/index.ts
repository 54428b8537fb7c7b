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
export {
  GarbageCollector,
  collectGarbageNow,
  setHeapGrowingPercent,
  MAX_HEAP_GROWING_PERCENT,
  ARENA_HEAP_GROWING_PERCENT,
  COLLECT_GARBAGE_EVERY_BYTES,
} from "./runtime/garbage-collector.js";
export { BufferPool, type BufferPoolOptions } from "./runtime/buffer-pool.js";
export { OpProfile, type OpTotals } from "./runtime/op-profile.js";
export { SessionCache, defaultIntraOpThreads, assertCudaAvailable, type RuntimeOptions, type ExecutionProvider } from "./runtime/session-cache.js";
export type { LocalAttention, AttentionOptions, AttentionDocuments, AttentionForwardResult, AttentionGradients } from "./attention/types.js";
export type { AdamWUpdate, BlockOps, LossOps, OptimizerOps, TrainingOps, LayerNormSaved, CrossEntropyResult, RopePositions } from "./ops/types.js";
export { ReferenceAttention } from "./reference/attention.js";
export { StatsReferenceAttention } from "./reference/stats-attention.js";
export { attentionDims, checkBackwardShapes, type AttentionDims, type AttentionErrorFactory } from "./attention/shapes.js";
export { documentRanges, keySpan, tileVisibility, type KeyRanges, type KeySpan, type TileVisibility } from "./attention/documents.js";
export { ReferenceOps, DEFAULT_ROPE_BASE } from "./reference/ops.js";
export { ropeAngle } from "./reference/rope.js";
export {
  ropeInverseFrequencies,
  ropeInverseFrequency,
  ropeScalingProblem,
  ropeScalingKey,
  ropeAttentionFactor,
  ropeTables,
  copyRopeScaling,
  ROPE_SCALING_TYPES,
  type RopeScaling,
} from "./ops/rope-scaling.js";
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
