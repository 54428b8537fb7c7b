/**
 * How a sequence of N tokens is split over the P ranks of a sequence-parallel
 * group: contiguous shards, sizes from `evenSplitSizes` (1000 over 3 -> 334,
 * 333, 333) unless the caller gives them. Rank r holds global positions
 * [starts[r], starts[r] + sizes[r]). Pure arithmetic; no communication.
 */
import { evenSplitSizes } from "@ulysses/tensors";
import { ParallelError } from "./errors.js";

export interface SequenceShards {
  /** Global sequence length N. */
  readonly length: number;
  /** Tokens held by each rank. */
  readonly sizes: readonly number[];
  /** Global position of each rank's first token. */
  readonly starts: readonly number[];
}

/** Where a caller says how the global sequence is split (default: N = localLength * P, equal shards). */
export interface SequenceOptions {
  /** Global sequence length; shards follow `evenSplitSizes(seqLength, P)`. */
  seqLength?: number;
  /** Explicit shard sizes (one per rank); overrides `seqLength`. */
  seqSizes?: readonly number[];
}

/**
 * The shards of this rank's group, checked against the local shard length.
 * Throws a ParallelError (before any communication) when they disagree.
 */
export function sequenceShards(localLength: number, rank: number, worldSize: number, options: SequenceOptions = {}): SequenceShards {
  let sizes: readonly number[];
  if (options.seqSizes !== undefined) {
    sizes = options.seqSizes;
    if (sizes.length !== worldSize || sizes.some((s) => !Number.isInteger(s) || s < 0)) {
      throw new ParallelError(`seqSizes [${sizes.join(", ")}] must hold ${worldSize} non-negative integers (one per rank)`);
    }
  } else {
    const length = options.seqLength ?? localLength * worldSize;
    if (!Number.isInteger(length) || length < 0) throw new ParallelError(`seqLength ${length} must be a non-negative integer`);
    sizes = evenSplitSizes(length, worldSize);
  }
  if (sizes[rank] !== localLength) {
    throw new ParallelError(
      `rank ${rank} holds ${localLength} tokens but the shard sizes [${sizes.join(", ")}] give it ${sizes[rank]} ` +
        `(pass the global seqLength when the sequence is not divisible by ${worldSize})`,
    );
  }
  if (sizes.some((s) => s === 0)) {
    throw new ParallelError(`every rank needs at least one token; shard sizes [${sizes.join(", ")}] over ${worldSize} ranks`);
  }
  const starts: number[] = [];
  let total = 0;
  for (const s of sizes) {
    starts.push(total);
    total += s;
  }
  return { length: total, sizes: [...sizes], starts };
}
