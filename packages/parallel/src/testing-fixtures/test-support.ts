/**
 * Helpers for this package's tests (not exported from the package): run a
 * function on every rank of a local group, shard and join sequences.
 * No block logic lives here; `spBlock` only composes the public pieces.
 */
import { createLocalGroups, type ProcessGroup } from "@ulysses/collectives";
import { TransformerBlock, type BlockConfig, type TransformerBlockOptions } from "@ulysses/block";
import { randomTensor, seededRandom } from "@ulysses/kernels/testing";
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

/** The tokens at `runs` of t along axis 1 ([b, N, ...] -> [b, total, ...]), in order. */
export function gatherShard<T extends Tensor<"float32">>(t: T, runs: readonly { start: number; length: number }[]): T {
  return concat(
    runs.map((run) => narrow(t, 1, run.start, run.length)),
    1,
  ) as T;
}

/** Puts per-rank shards (rank r's tokens at runs[r]) back in sequence order along axis 1. */
export function scatterShards(parts: readonly Tensor<"float32">[], runs: readonly (readonly { start: number; length: number }[])[]): Tensor<"float32"> {
  const pieces: { start: number; tensor: Tensor<"float32"> }[] = [];
  parts.forEach((part, r) => {
    let at = 0;
    for (const run of runs[r]!) {
      pieces.push({ start: run.start, tensor: narrow(part, 1, at, run.length) });
      at += run.length;
    }
  });
  pieces.sort((a, b) => a.start - b.start);
  return concat(
    pieces.map((p) => p.tensor),
    1,
  );
}

/** The shape of one attention case: q [batch, seq, heads, headDim], k and v [batch, seq, kvHeads, headDim]. */
export interface AttentionShape {
  batch: number;
  seq: number;
  heads: number;
  kvHeads: number;
  headDim: number;
}

/** Seeded random q, k, v and an output gradient dOut for one attention case. */
export function attentionInputs(c: AttentionShape, seed: number) {
  const random = seededRandom(seed);
  return {
    q: randomTensor([c.batch, c.seq, c.heads, c.headDim], random),
    k: randomTensor([c.batch, c.seq, c.kvHeads, c.headDim], random),
    v: randomTensor([c.batch, c.seq, c.kvHeads, c.headDim], random),
    dOut: randomTensor([c.batch, c.seq, c.heads, c.headDim], random),
  };
}
