/**
 * @ulysses/block: the transformer block as one-device code, forward and
 * backward: its configuration and weights, the attention contract it calls
 * (`BlockAttention`), and its forward pass written once over `BlockMath` so
 * training and ONNX export run the same definition. No communication: the
 * sequence-parallel attention wrappers live in @ulysses/parallel.
 */
export { BlockError } from "./errors.js";
export {
  LocalBlockAttention,
  type BlockAttentionOptions,
  SavedLocalAttention,
  KeptLocalStatistics,
  type KeptAttention,
  checkGradShape,
  checkOwnContext,
  exclusive,
  type BlockAttention,
  type BlockAttentionContext,
  type BlockAttentionForward,
} from "./block-attention.js";
export { blockForward, type BlockMath, type LinearName, type NormName } from "./block-forward.js";
export { elementwiseOpsOf } from "./elementwise-ops.js";
export { registerNorm, normComponent, normNames, type NormComponent, type NormTensors } from "./norms.js";
export { registerMlp, mlpComponent, mlpNames, type MlpComponent, type MlpProjection } from "./mlps.js";
export { resolveBlockConfig, hasBias, type AttentionBias, type BlockConfig, type ResolvedBlockConfig, type MlpKind, type NormKind } from "./block-config.js";
export {
  addWith,
  blockWeightSpecs,
  QK_NORMS,
  type QkNormName,
  initBlockWeights,
  checkBlockWeights,
  FlatTensors,
  type BlockWeights,
  type WeightSpec,
} from "./block-weights.js";
export { headGroupTileRowsOf } from "./head-groups.js";
export { TransformerBlock, type TransformerBlockOptions, type BlockForwardOptions, type BlockBackwardOptions } from "./transformer-block.js";
export { BlockContext, type BlockGradients } from "./block-activations.js";
