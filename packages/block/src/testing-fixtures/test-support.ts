/**
 * Helpers for this package's tests (not exported from the package): run a
 * function on every rank of a local group, shard and join sequences.
 * No block logic lives here.
 */
import { createLocalGroups, type ProcessGroup } from "@ulysses/collectives";
import { concat, narrow, type Tensor } from "@ulysses/tensors";

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
