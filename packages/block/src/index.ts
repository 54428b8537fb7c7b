/**
 * @ulysses/block: sequence-parallel attention wrappers (Ulysses and the
 * all-gather-KV baseline) and the transformer block, forward and backward per
 * rank. The only package where communication (@ulysses/collectives) and
 * compute (@ulysses/kernels) meet.
 */
export { BlockError } from "./errors.js";
export { sequenceShards, type SequenceShards, type SequenceOptions } from "./sequence-shards.js";
export { headRouting, checkHeads, type HeadRouting, type HeadRange } from "./head-routing.js";
export { SavedLocalAttention, type ShardedAttention, type ShardedAttentionContext, type ShardedAttentionForward, type ShardedAttentionOptions } from "./sharded-attention.js";
export { UlyssesAttention, UlyssesContext } from "./ulysses-attention.js";
export { AllGatherKVAttention, AllGatherKVContext } from "./allgather-kv-attention.js";
export { resolveBlockConfig, type BlockConfig, type ResolvedBlockConfig, type MlpKind, type NormKind, type AttentionKind } from "./block-config.js";
export { blockWeightSpecs, initBlockWeights, checkBlockWeights, FlatTensors, type BlockWeights, type WeightSpec } from "./block-weights.js";
export { TensorPool } from "./tensor-pool.js";
export { TransformerBlock, BlockContext, createShardedAttention, type TransformerBlockOptions, type BlockBackwardOptions, type BlockGradients } from "./transformer-block.js";
