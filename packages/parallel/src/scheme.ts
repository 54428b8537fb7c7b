/**
 * A sequence-parallel scheme as one descriptor: everything that differs
 * between Ulysses, all-gather-KV, ring, hybrid or a scheme of a user's own,
 * in one object, registered by name like the kernels' local attentions.
 * `ParallelDims` (validation, groups), `parallelize` (the wrapper of each
 * layer's attention), the byte formulas, the memory account and the run
 * header read the registry; none of them names a scheme. A new scheme is one
 * file that builds its descriptor plus one `registerSequenceParallelScheme`
 * call.
 */
import type { ProcessGroup } from "@ulysses/collectives";
import type { LocalAttention } from "@ulysses/kernels";
import type { ParallelDimsNames, ParallelDimsOptions, ParallelShape } from "./parallel-dims.js";
import type { SequenceLayoutKind } from "./sequence-shards.js";
import type { ShardedAttention } from "./sharded-attention.js";

/** The degrees a scheme resolves: Ulysses groups of u ranks, r of them around a ring (u x r = sp). */
export interface SchemeDegrees {
  ulyssesDegree: number;
  ringDegree: number;
}

/** A scheme's subgroups of one SP group (hybrid: its Ulysses and ring groups). */
export type SchemeGroups = Record<string, ProcessGroup>;

/** What `create` builds a wrapper from. */
export interface SchemeCreateOptions {
  /** The SP group the wrapper runs on. */
  group: ProcessGroup;
  /** The subgroups `groups` built (empty when the scheme has none). */
  groups: SchemeGroups;
  degrees: SchemeDegrees;
  /** Ulysses' exchanges pipelined in this many chunks of heads (1: off); only schemes whose settings name "pipelineChunks" take more. */
  pipelineChunks: number;
}

/** Inputs of a scheme's exact byte count for one attention call of one rank. */
export interface SchemeBytesInput {
  /** Tokens of each SP rank (sp entries). */
  sizes: readonly number[];
  /** This rank's index in the SP group. */
  rank: number;
  batch: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  degrees: SchemeDegrees;
  /** Causal attention under the contiguous layout: a ring skips the blocks of later positions. */
  skipsFuture: boolean;
}

/** Bytes one rank sends per attention call (one layer). */
export interface CallBytes {
  forward: number;
  backward: number;
}

/** A scheme's part of one layer's memory, in floats per local token (see layerFloatsPerToken). */
export interface SchemeMemory {
  /** Width of k (and of v) as the local kernel sees them, per local token. */
  kvWidth: number;
  /** Whether the scheme keeps send and receive areas for q, k, v when it exchanges (sp > 1). */
  exchangeAreas: boolean;
  /** Fraction of the exchanged tensors that travels (a rank's own block of an all-to-all does not). */
  travels: number;
  /** Whether its exchanges run in chunks of at most EXCHANGE_CHUNK_BYTES (so their areas are bounded). */
  chunked: boolean;
}

/** Inputs of a scheme's memory terms. */
export interface SchemeMemoryInput {
  sp: number;
  kvHeads: number;
  headDim: number;
  degrees: SchemeDegrees;
  pipelineChunks: number;
}

export interface SequenceParallelScheme {
  /** The name a caller selects it by (`--attention NAME`). */
  readonly name: string;
  /** Optional settings it reads besides sp, dp and layout: "ulyssesDegree", "ringDegree" (hybrid), "pipelineChunks" (pipelined Ulysses). */
  readonly settings: readonly ("ulyssesDegree" | "ringDegree" | "pipelineChunks")[];
  /** The degrees the options imply (before validation: may be inconsistent). */
  resolve(options: ParallelDimsOptions, kvHeads: number): SchemeDegrees;
  /** Its own problems with a layout, worded with the caller's names; empty when fine. */
  problems(options: ParallelDimsOptions, shape: ParallelShape, degrees: SchemeDegrees, names: ParallelDimsNames): string[];
  /** Ranks that split the attention heads between them (1 when every rank runs every head). */
  headRanks(degrees: SchemeDegrees): number;
  /** Collective over the SP group: the subgroups it needs (absent: none). */
  groups?(spGroup: ProcessGroup, degrees: SchemeDegrees): Promise<SchemeGroups>;
  /**
   * Whether the wrapper `create` builds with these settings keeps a context's output and rebuilds the context from it
   * (BlockAttention.keepOutput and restore: a block's keepAttentionOutputs). Absent: never.
   */
  keepsOutputs?(pipelineChunks: number): boolean;
  /** The sharded attention of one local kernel. */
  create(local: LocalAttention, options: SchemeCreateOptions): ShardedAttention;
  /** Exact bytes one rank sends per attention call. */
  bytes(input: SchemeBytesInput): CallBytes;
  /** Its part of one layer's memory. */
  memory(input: SchemeMemoryInput): SchemeMemory;
  /** The run header's words for it at sp > 1, e.g. "hybrid attention (Ulysses 2 x ring 2, zigzag layout)". */
  describe(degrees: SchemeDegrees, layout: SequenceLayoutKind): string;
}
