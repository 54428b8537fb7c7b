/**
 * @ulysses/parallel: sequence parallelism applied from outside to one-device
 * models. `ParallelDims` validates and builds the SP x DP layout,
 * `parallelize(model, dims)` swaps every layer's attention for a sharded one
 * and shards the inputs; the attention wrappers (Ulysses, ring, hybrid
 * Ulysses x ring and the all-gather-KV baseline) work on their own too. The only package where
 * communication (@ulysses/collectives) and compute (@ulysses/kernels) meet.
 */
export { ParallelError } from "./errors.js";
export {
  sequenceShards,
  shardRuns,
  joinRuns,
  isContiguous,
  gatherRuns,
  runPositions,
  SEQUENCE_LAYOUTS,
  type SequenceShards,
  type SequenceOptions,
  type SequenceRun,
  type SequenceLayoutKind,
} from "./sequence-shards.js";
export { shardBatch, type Batch, type BatchShard, type BatchDocuments, type ShardDocuments } from "./shard-batch.js";
export { headRouting, checkHeads, type HeadRouting, type HeadRange } from "./head-routing.js";
export { documentSlice, documentRuns, type ShardedAttention, type ShardedAttentionForward, type ShardedAttentionOptions } from "./sharded-attention.js";
export { UlyssesAttention, type UlyssesAttentionOptions, type UlyssesContext } from "./ulysses-attention.js";
export {
  EXCHANGE_CHUNK_BYTES,
  seqAllToAll,
  seqToHeads,
  headsToSeq,
  type SeqAllToAllDirection,
  type SeqAllToAllPart,
  type SeqExchange,
  type HeadSet,
} from "./seq-all-to-all.js";
export { AllGatherKVAttention, type AllGatherKVContext } from "./allgather-kv-attention.js";
export {
  RingAttention,
  ringForwardBytes,
  ringBackwardBytes,
  ringSends,
  ringHolds,
  type RingContext,
  type RingAttentionOptions,
  type RingStats,
  type BlockCall,
} from "./ring-attention.js";
export { HybridAttention, HybridContext } from "./hybrid-attention.js";
export { PipelinedUlyssesAttention, PipelinedUlyssesContext } from "./pipelined-ulysses.js";
export { TensorPool } from "./tensor-pool.js";
export {
  ParallelDims,
  parallelDimsProblems,
  validateParallelDims,
  resolveDims,
  type HybridGroups,
  type ResolvedDims,
  type ParallelDimsOptions,
  type ParallelDimsNames,
  type ParallelShape,
  type SequenceParallelKind,
} from "./parallel-dims.js";
export { parallelize, createShardedAttention, ParallelGpt, ParallelBlock, type ParallelGptContext, type ParallelBlockContext } from "./parallelize.js";
export { ulyssesBytes, ringBytes, hybridBytes, allGatherKVBytes } from "./scheme-bytes.js";
export type {
  SequenceParallelScheme,
  SchemeDegrees,
  SchemeGroups,
  SchemeCreateOptions,
  SchemeBytesInput,
  SchemeMemory,
  SchemeMemoryInput,
  CallBytes,
} from "./scheme.js";
export { registerSequenceParallelScheme, sequenceParallelScheme, findSequenceParallelScheme, sequenceParallelSchemeNames } from "./scheme-registry.js";
export { layerFloatsPerToken, type LayerFloats } from "./layer-memory.js";
