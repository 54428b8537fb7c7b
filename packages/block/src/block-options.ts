/**
 * The options of a TransformerBlock: how it is built (kernels, attention,
 * weights, checkpointing, tiles, head groups) and what a forward and a
 * backward are called with.
 */
import type { LocalAttention, BlockOps, RopePositions } from "@ulysses/kernels";
import type { BlockAttention } from "./block-attention.js";
import type { BlockWeights } from "./block-weights.js";

export interface TransformerBlockOptions {
  ops: BlockOps;
  /** The local kernel to run attention with (or give `attention`). */
  localAttention?: LocalAttention;
  /** A ready BlockAttention (for example one shared by several blocks). */
  attention?: BlockAttention;
  /** Weights to use (not copied); default: `initBlockWeights(config, seed)`. */
  weights?: BlockWeights;
  /** Seed for the default weights (default 0). */
  seed?: number;
  /** Activation checkpointing: keep only the block input, recompute in backward what backward reads. */
  checkpoint?: boolean;
  /**
   * Tiled MLP: rows of the [b * s, hidden] input per tile (a positive
   * integer; a value >= b * s is one tile); 0 or undefined: off. The MLP half
   * runs tile by tile, forward keeps only its input x2, and backward
   * recomputes each tile, so the [rows, mlpHidden] intermediates exist for
   * one tile at a time.
   */
  mlpTileRows?: number;
  /**
   * Attention in head groups: the attention half runs over this many groups
   * of heads (dividing heads and kvHeads), forward and backward, and keeps
   * nothing (backward recomputes it group by group). 1 or undefined: off.
   */
  attentionHeadGroups?: number;
  /**
   * With head groups and without checkpointing: each group's attention
   * output ([b, s, H/G, D], float32) and the attention's statistics
   * (BlockAttention.keepOutput) are kept for backward, which makes the
   * group's q, k, v again and rebuilds the attention's context from them
   * (BlockAttention.restore) instead of running its forward again: the
   * attention's forward runs once per step, for b * s * heads * headDim
   * floats more per block. Needs an attention with keepOutput and restore.
   * Default false.
   */
  keepAttentionOutputs?: boolean;
  /**
   * With head groups: rows per tile of a group's full-width terms (its share
   * of x2 = x + attention @ Wo in forward, of dh1 in backward), which are
   * computed and summed tile by tile (a positive integer; default: the rows
   * of 4 MiB, headGroupTileRowsOf).
   */
  headGroupTileRows?: number;
}

export interface BlockForwardOptions {
  /** RoPE positions: the first token's (default 0), or every token's, int32 [b * s]. */
  positions?: RopePositions;
  /** Packed documents: each token's document id, int32 [b * s], non-decreasing per row; attention never crosses a document. */
  documents?: Int32Array;
  /**
   * What this forward's attention needs besides its tensors, opaque to the
   * block: handed to the attention's forward (BlockAttentionOptions.run), and
   * again on a recompute in backward. A sharded attention's shard layout.
   */
  attentionRun?: unknown;
}

export interface BlockBackwardOptions {
  /**
   * dy is the caller's to give away: backward may overwrite it (the MLP's
   * input gradient dx2 is built in dy's buffer instead of a new one), so one
   * [b, s, hidden] tensor less is alive through the attention's backward.
   * Default false: dy is left as it was.
   */
  overwriteDy?: boolean;
}
