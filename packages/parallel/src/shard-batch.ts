/**
 * A batch of whole sequences and one rank's sequence-parallel shard of it.
 * Labels are shifted BEFORE sharding: labels[b, i] is the token that should
 * follow tokens[b, i], so the label of a shard's last token, whose successor
 * lives on the next rank, is already right when the shard is cut. Shards are
 * contiguous with sizes from `evenSplitSizes` (N not divisible by P is fine).
 */
import { type Tensor, evenSplitSizes, narrow } from "@ulysses/tensors";
import { ParallelError } from "./errors.js";

/** Packed documents of a batch. */
export interface BatchDocuments {
  /** [batch, seq] int32: the document id of each token, non-decreasing along a row (ids need not start at 0). */
  ids: Tensor<"int32">;
  /** [batch, seq] int32: each token's position within its document (RoPE; restarts at each document). */
  positions: Tensor<"int32">;
}

export interface Batch {
  /** [batch, seq] token ids */
  tokens: Tensor<"int32">;
  /** [batch, seq] next-token labels (already shifted) */
  labels: Tensor<"int32">;
  /** Packed documents (absent: one document per row, positions 0 .. seq - 1). */
  documents?: BatchDocuments;
}

/** A shard's packed documents: its own tokens' ids and positions, and the ids of the whole sequence (the attention needs them). */
export interface ShardDocuments extends BatchDocuments {
  /** [batch, N] int32: every token's document id. */
  sequenceIds: Tensor<"int32">;
}

export interface BatchShard extends Omit<Batch, "documents"> {
  documents?: ShardDocuments;
  /** Global position of the shard's first token (for rotary embeddings). */
  offset: number;
  /** Global sequence length N. */
  seqLength: number;
  /** Tokens held by each rank. */
  sizes: number[];
}

/** This rank's contiguous shard of the sequence axis (axis 1). */
export function shardBatch(batch: Batch, rank: number, worldSize: number): BatchShard {
  const [b, n] = batch.tokens.shape as [number, number];
  if (batch.labels.shape[0] !== b || batch.labels.shape[1] !== n) {
    throw new ParallelError(`tokens [${b}, ${n}] and labels [${batch.labels.shape.join(", ")}] differ in shape`);
  }
  if (n < worldSize) throw new ParallelError(`a sequence of ${n} tokens cannot be split over ${worldSize} ranks (each needs at least one)`);
  if (!Number.isInteger(rank) || rank < 0 || rank >= worldSize) throw new ParallelError(`rank ${rank} is outside a group of ${worldSize}`);
  const sizes = evenSplitSizes(n, worldSize);
  const offset = sizes.slice(0, rank).reduce((a, s) => a + s, 0);
  // [b, n] -> [b, n_r]
  const shard: BatchShard = {
    tokens: narrow(batch.tokens, 1, offset, sizes[rank]!),
    labels: narrow(batch.labels, 1, offset, sizes[rank]!),
    offset,
    seqLength: n,
    sizes,
  };
  const documents = batch.documents;
  if (documents !== undefined) {
    for (const [name, t] of [
      ["ids", documents.ids],
      ["positions", documents.positions],
    ] as const) {
      if (t.dtype !== "int32" || t.shape[0] !== b || t.shape[1] !== n)
        throw new ParallelError(`documents.${name} must be int32 [${b}, ${n}] like the tokens, got ${t.dtype} [${t.shape.join(", ")}]`);
    }
    shard.documents = {
      ids: narrow(documents.ids, 1, offset, sizes[rank]!),
      positions: narrow(documents.positions, 1, offset, sizes[rank]!),
      sequenceIds: documents.ids,
    };
  }
  return shard;
}
