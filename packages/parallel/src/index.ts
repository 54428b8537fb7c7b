/**
 * @ulysses/parallel: sequence parallelism applied from outside to one-device
 * models. `ParallelDims` validates and builds the SP x DP layout,
 * `parallelize(model, dims)` swaps every layer's attention for a sharded one
 * and shards the inputs; the attention wrappers (Ulysses, ring and the
 * all-gather-KV baseline) work on their own too. The only package where
 * communication (@ulysses/collectives) and compute (@ulysses/kernels) meet.
 */
export { ParallelError } from "./errors.js";
export { sequenceShards, type SequenceShards, type SequenceOptions } from "./sequence-shards.js";
export { shardBatch, type Batch, type BatchShard, type BatchDocuments, type ShardDocuments } from "./shard-batch.js";
export { headRouting, checkHeads, type HeadRouting, type HeadRange } from "./head-routing.js";
export { documentSlice, type ShardedAttention, type ShardedAttentionForward, type ShardedAttentionOptions } from "./sharded-attention.js";
export { UlyssesAttention, type UlyssesContext } from "./ulysses-attention.js";
export { seqAllToAll, seqToHeads, headsToSeq, type SeqAllToAllDirection, type SeqAllToAllPart, type SeqExchange, type HeadSet } from "./seq-all-to-all.js";
export { AllGatherKVAttention, type AllGatherKVContext } from "./allgather-kv-attention.js";
export {
  RingAttention,
  ringForwardBytes,
  ringBackwardBytes,
  ringSends,
  ringHolds,
  type RingContext,
} from "./ring-attention.js";
export { TensorPool } from "./tensor-pool.js";
export {
  ParallelDims,
  parallelDimsProblems,
  validateParallelDims,
  SEQUENCE_PARALLEL_KINDS,
  type ParallelDimsOptions,
  type ParallelDimsNames,
  type ParallelShape,
  type SequenceParallelKind,
} from "./parallel-dims.js";
export { parallelize, createShardedAttention, ParallelGpt, ParallelBlock, type ParallelGptContext, type ParallelBlockContext } from "./parallelize.js";
