/**
 * A batch of whole sequences and one rank's sequence-parallel shard of it.
 * Labels are shifted BEFORE sharding: labels[b, i] is the token that should
 * follow tokens[b, i], so the label of a shard's last token, whose successor
 * lives on another rank, is already right when the shard is cut. Shards are
 * contiguous with sizes from `evenSplitSizes` (N not divisible by P is fine)
 * unless the caller gives every rank's runs of positions (`shardRuns`, e.g.
 * the zigzag layout); tokens, labels, document ids and positions are all
 * gathered from the same runs, so the loss sees every token once.
 */
import type { LMBatch, LMBatchDocuments } from "@ulysses/model";
import { Tensor } from "@ulysses/tensors";
import { ParallelError } from "./errors.js";
import { gatherRuns, runPositions, shardRuns, type SequenceRun } from "./sequence-shards.js";

/** Packed documents of a batch (the model contract's LMBatchDocuments). */
export type BatchDocuments = LMBatchDocuments;

/** A batch of whole sequences (the model contract's LMBatch). */
export type Batch = LMBatch;

/** A shard's packed documents: its own tokens' ids and positions, and the ids of the whole sequence (the attention needs them). */
export interface ShardDocuments extends BatchDocuments {
  /** [batch, N] int32: every token's document id. */
  sequenceIds: Tensor<"int32">;
}

export interface BatchShard extends Omit<Batch, "documents"> {
  documents?: ShardDocuments;
  /** Global position of the shard's first token. */
  offset: number;
  /** Global sequence length N. */
  seqLength: number;
  /** Tokens held by each rank. */
  sizes: number[];
  /** Every rank's runs of global positions (this rank's: runs[rank]). */
  runs: SequenceRun[][];
  /** RoPE positions of this shard's tokens, int32 [batch * s_r]: document positions, else global positions (absent: contiguous, from `offset`). */
  positions?: Tensor<"int32">;
}

/** Gathers the runs of axis 1 of a [b, n] int32 tensor. */
function gather(t: Tensor<"int32">, runs: readonly SequenceRun[]): Tensor<"int32"> {
  const [b, n] = t.shape as [number, number];
  const total = runs.reduce((a, run) => a + run.length, 0);
  const data = gatherRuns(t.data, b, n, runs);
  return new Tensor("int32", [b, total], data === t.data ? data.slice() : data);
}

/** This rank's shard of the sequence axis (axis 1): contiguous, or the positions of `runs[rank]` (every rank's runs, e.g. `shardRuns(n, P, "zigzag")`). */
export function shardBatch(batch: Batch, rank: number, worldSize: number, runs?: readonly (readonly SequenceRun[])[]): BatchShard {
  const [b, n] = batch.tokens.shape as [number, number];
  if (batch.labels.shape[0] !== b || batch.labels.shape[1] !== n) {
    throw new ParallelError(`tokens [${b}, ${n}] and labels [${batch.labels.shape.join(", ")}] differ in shape`);
  }
  if (n < worldSize) throw new ParallelError(`a sequence of ${n} tokens cannot be split over ${worldSize} ranks (each needs at least one)`);
  if (!Number.isInteger(rank) || rank < 0 || rank >= worldSize) throw new ParallelError(`rank ${rank} is outside a group of ${worldSize}`);
  const all = (runs ?? shardRuns(n, worldSize, "contiguous")).map((r) => r.map((run) => ({ ...run })));
  if (all.length !== worldSize || all.some((r) => r.length === 0) || all.flat().reduce((a, run) => a + run.length, 0) !== n)
    throw new ParallelError(
      `shardBatch: the runs give ${all.length} ranks ${all.flat().reduce((a, run) => a + run.length, 0)} tokens, not ${worldSize} ranks ${n} tokens`,
    );
  const mine = all[rank]!;
  const sizes = all.map((r) => r.reduce((a, run) => a + run.length, 0));
  // [b, n] -> [b, n_r] (the rank's runs, in order)
  const shard: BatchShard = {
    tokens: gather(batch.tokens, mine),
    labels: gather(batch.labels, mine),
    offset: mine[0]!.start,
    seqLength: n,
    sizes,
    runs: all,
  };
  if (mine.length > 1) shard.positions = new Tensor("int32", [b, sizes[rank]!], runPositions(mine, b));
  const documents = batch.documents;
  if (documents !== undefined) {
    for (const [name, t] of [
      ["ids", documents.ids],
      ["positions", documents.positions],
    ] as const) {
      if (t.dtype !== "int32" || t.shape[0] !== b || t.shape[1] !== n)
        throw new ParallelError(`documents.${name} must be int32 [${b}, ${n}] like the tokens, got ${t.dtype} [${t.shape.join(", ")}]`);
    }
    shard.documents = { ids: gather(documents.ids, mine), positions: gather(documents.positions, mine), sequenceIds: documents.ids };
    shard.positions = shard.documents.positions;
  }
  return shard;
}
