/**
 * The contract shared by the sequence-parallel attention wrappers
 * (UlyssesAttention, AllGatherKVAttention): the block's BlockAttention
 * contract (@ulysses/block) on each rank's sequence shard. q is [b, s_r, heads, D], k and v are
 * [b, s_r, kvHeads, D] where s_r is this rank's shard of the global sequence;
 * out is [b, s_r, heads, D]. Causal masking is global: the query at global
 * position i attends keys at global positions <= i.
 *
 * forward returns a context holding what backward needs (in the wrapper's own
 * layout); drop it and call forward again to recompute (activation
 * checkpointing). A wrapper instance serves one call at a time (it reuses its
 * exchange buffers); use one instance per concurrent stream.
 */
import type { BlockAttention, BlockAttentionContext, BlockAttentionForward } from "@ulysses/block";
import { attentionDims, type AttentionOptions } from "@ulysses/kernels";
import type { ProcessGroup } from "@ulysses/collectives";
import type { Tensor } from "@ulysses/tensors";
import { ParallelError } from "./errors.js";
import { gatherRuns, type SequenceOptions, type SequenceRun } from "./sequence-shards.js";

type F32 = Tensor<"float32">;

export interface ShardedAttentionOptions extends Omit<AttentionOptions, "documents">, SequenceOptions {
  /** Packed documents: the document id of every token of the whole sequence, int32 [b * N], non-decreasing per row. */
  sequenceDocuments?: Int32Array;
}

/** Document ids of tokens [start, start + length) of every row of [b, N] ids (null when there are none). */
export function documentSlice(ids: Int32Array | undefined, batch: number, seqLength: number, start: number, length: number, who: string): Int32Array | null {
  return documentRuns(ids, batch, seqLength, [{ start, length }], who);
}

/** Document ids of the tokens at `runs` (global positions, increasing) of every row of [b, N] ids: [b, total] (null when there are none). */
export function documentRuns(ids: Int32Array | undefined, batch: number, seqLength: number, runs: readonly SequenceRun[], who: string): Int32Array | null {
  if (ids === undefined) return null;
  checkSequenceDocuments(ids, batch, seqLength, who);
  // [b, N] -> [b, total]
  return gatherRuns(ids, batch, seqLength, runs);
}

/** Throws a ParallelError unless `ids` (when given) are the b * N document ids of the whole sequence. */
export function checkSequenceDocuments(ids: Int32Array | undefined, batch: number, seqLength: number, who: string): void {
  if (ids !== undefined && (!(ids instanceof Int32Array) || ids.length !== batch * seqLength)) {
    throw new ParallelError(
      `${who}: sequenceDocuments must be an Int32Array of b * N = ${batch} * ${seqLength} = ${batch * seqLength} ids, got ${ids?.length ?? typeof ids}`,
    );
  }
}

export interface ShardedAttentionForward<C extends BlockAttentionContext = BlockAttentionContext> extends BlockAttentionForward<C> {}

/** A BlockAttention whose tokens are this rank's shard of a sequence spread over `group`. */
export interface ShardedAttention<C extends BlockAttentionContext = BlockAttentionContext> extends BlockAttention<C> {
  readonly group: ProcessGroup;
  /** Throws a ParallelError when heads/kvHeads cannot run on this group (called before any communication). */
  checkHeads(heads: number, kvHeads: number): void;
  /** As BlockAttention.forward, with the sequence's shard sizes. */
  forward(q: F32, k: F32, v: F32, options: ShardedAttentionOptions): Promise<ShardedAttentionForward<C>>;
}

export interface ShardDims {
  batch: number;
  seq: number;
  heads: number;
  kvHeads: number;
  headDim: number;
}

/**
 * Checks the local shard shapes of q, k, v with the kernels' validator
 * (float32, rank 4, k matching q in batch and headDim, v shaped like k, heads
 * a multiple of kvHeads; ParallelErrors) plus what only sharding needs: k and
 * v hold the same sequence shard as q. Returns their dimensions.
 */
export function shardDims(q: F32, k: F32, v: F32, who: string): ShardDims {
  const { batch, seqQ, seqK, heads, kvHeads, headDim } = attentionDims(q, k, v, { causal: true }, who, (message) => new ParallelError(message));
  if (seqQ !== seqK) {
    throw new ParallelError(
      `${who}: k and v [${k.shape.join(", ")}] hold ${seqK} tokens but q [${q.shape.join(", ")}] holds ${seqQ}: ` +
        `q, k and v must be the same sequence shard`,
    );
  }
  return { batch, seq: seqQ, heads, kvHeads, headDim };
}
