/**
 * Helpers for this package's tests (not exported from the package): run a
 * function on every rank of a local group, shard and join sequences.
 * No block logic lives here; `spBlock` only composes the public pieces.
 */
import { createLocalGroups, type ProcessGroup } from "@ulysses/collectives";
import { TransformerBlock, type BlockConfig, type TransformerBlockOptions } from "@ulysses/block";
import { concat, narrow, type Tensor } from "@ulysses/tensors";
import type { SequenceParallelKind } from "../parallel-dims.js";
import { ParallelBlock } from "../parallelize.js";
import type { ShardedAttention } from "../sharded-attention.js";

/** Runs fn on every rank of a fresh local group of `size` ranks; resolves with the per-rank results. */
export async function runRanks<T>(size: number, fn: (group: ProcessGroup, rank: number) => Promise<T>): Promise<T[]> {
  const groups = createLocalGroups(size);
  try {
    return await Promise.all(groups.map((g, r) => fn(g, r)));
  } finally {
    await Promise.all(groups.map((g) => g.destroy()));
  }
}

/** Tokens [start, start + size) of t along axis 1 ([b, N, ...] -> [b, size, ...]). */
export function shardOf<T extends Tensor<"float32">>(t: T, sizes: readonly number[], rank: number): T {
  const start = sizes.slice(0, rank).reduce((a, b) => a + b, 0);
  return narrow(t, 1, start, sizes[rank]!) as T;
}

/** Joins per-rank shards along axis 1. */
export function joinShards(parts: readonly Tensor<"float32">[]): Tensor<"float32"> {
  return concat(parts, 1);
}

/** A block config plus the sequence-parallel kind the tests run it with. */
export type SpBlockConfig = BlockConfig & { attention?: SequenceParallelKind };

/** A one-device TransformerBlock made sequence-parallel over `group` (the kind taken from the config). */
export function spBlock(config: SpBlockConfig, group: ProcessGroup, options: TransformerBlockOptions, share?: ShardedAttention): ParallelBlock {
  const { attention: kind = "ulysses", ...blockConfig } = config;
  return new ParallelBlock(new TransformerBlock(blockConfig, options), group, share ?? kind);
}
