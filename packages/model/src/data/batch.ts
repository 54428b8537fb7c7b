/**
 * A training batch and its sequence-parallel shard. Labels are shifted BEFORE
 * sharding: labels[b, i] is the token that should follow tokens[b, i] (or
 * IGNORE_INDEX), so the label of a shard's last token, whose successor lives
 * on the next rank, is already right when the shard is cut. Shards are
 * contiguous with sizes from `evenSplitSizes` (N not divisible by P is fine).
 */
import { Tensor, evenSplitSizes, narrow } from "@ulysses/tensors";
import { ModelError } from "../errors.js";

/** Labels equal to this do not count towards the loss or the accuracy. */
export const IGNORE_INDEX = -100;

export interface Batch {
  /** [batch, seq] token ids */
  tokens: Tensor<"int32">;
  /** [batch, seq] next-token labels (already shifted), IGNORE_INDEX where nothing is predicted */
  labels: Tensor<"int32">;
}

export interface BatchShard extends Batch {
  /** Global position of the shard's first token (for rotary embeddings). */
  offset: number;
  /** Global sequence length N. */
  seqLength: number;
  /** Tokens held by each rank. */
  sizes: number[];
}

/** Shift a [batch, seq + 1] window into tokens [batch, seq] and labels [batch, seq]. */
export function shiftWindows(windows: Int32Array, batch: number, seq: number): Batch {
  if (windows.length !== batch * (seq + 1)) throw new ModelError(`shiftWindows: ${windows.length} values for batch ${batch} x (seq ${seq} + 1)`);
  const tokens = new Tensor("int32", [batch, seq]);
  const labels = new Tensor("int32", [batch, seq]);
  for (let b = 0; b < batch; b++) {
    tokens.data.set(windows.subarray(b * (seq + 1), b * (seq + 1) + seq), b * seq);
    labels.data.set(windows.subarray(b * (seq + 1) + 1, (b + 1) * (seq + 1)), b * seq);
  }
  return { tokens, labels };
}

/** This rank's contiguous shard of the sequence axis (axis 1). */
export function shardBatch(batch: Batch, rank: number, worldSize: number): BatchShard {
  const [b, n] = batch.tokens.shape as [number, number];
  if (batch.labels.shape[0] !== b || batch.labels.shape[1] !== n) {
    throw new ModelError(`tokens [${b}, ${n}] and labels [${batch.labels.shape.join(", ")}] differ in shape`);
  }
  if (n < worldSize) throw new ModelError(`a sequence of ${n} tokens cannot be split over ${worldSize} ranks (each needs at least one)`);
  if (!Number.isInteger(rank) || rank < 0 || rank >= worldSize) throw new ModelError(`rank ${rank} is outside a group of ${worldSize}`);
  const sizes = evenSplitSizes(n, worldSize);
  const offset = sizes.slice(0, rank).reduce((a, s) => a + s, 0);
  // [b, n] -> [b, n_r]
  return {
    tokens: narrow(batch.tokens, 1, offset, sizes[rank]!),
    labels: narrow(batch.labels, 1, offset, sizes[rank]!),
    offset,
    seqLength: n,
    sizes,
  };
}
