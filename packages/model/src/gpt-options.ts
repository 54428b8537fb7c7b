/**
 * The options of a Gpt: how it is built (kernels, attention, seed, the
 * memory settings of its blocks, sharded or shared weights) and what a
 * forward is called with; and the rule of when its blocks may keep what
 * they keep in bf16.
 */
import type { BlockAttention } from "@ulysses/block";
import type { BlockOps, LocalAttention, RopePositions } from "@ulysses/kernels";

export interface GptOptions {
  ops: BlockOps;
  /** The attention kernel every layer runs (or give `attention`). */
  localAttention?: LocalAttention;
  /** One BlockAttention shared by every layer (layers run one at a time). */
  attention?: BlockAttention;
  seed: number;
  /** Recompute each block's activations in backward. */
  activationCheckpointing?: boolean;
  /**
   * Keep what each block keeps for backward as bf16 (BlockContext.storeInBfloat16), half the bytes: with activation
   * checkpointing its input (the backward recomputes the block from the rounded input); with attention in head groups and
   * a tiled MLP and no checkpointing, its input and the MLP's input (the backward recomputes the attention and the MLP
   * tiles from them). Default false (float32).
   */
  bfloat16Checkpoints?: boolean;
  /**
   * Rows per tile of every block's MLP (passed to each TransformerBlock as
   * its `mlpTileRows`; 0 or undefined: untiled). The block checks it.
   */
  mlpTileRows?: number;
  /** Attention in head groups in every block (each TransformerBlock's `attentionHeadGroups`; 1 or undefined: off). */
  attentionHeadGroups?: number;
  /**
   * With head groups and no checkpointing: every block keeps its groups' attention outputs (float32, also under
   * bfloat16Checkpoints) so that backward runs no attention forward (each TransformerBlock's `keepAttentionOutputs`).
   */
  keepAttentionOutputs?: boolean;
  /**
   * Vocabulary columns per block of the LM head's weight gradient (a positive
   * integer; the vocabulary or more: one block). Default: headGradientColumns,
   * blocks of at most HEAD_GRADIENT_BLOCK_BYTES. `lmHead({ gradientColumns })`
   * overrides it for one head. Unused when the ops have
   * linearWeightGradientInto: the head's gradient is then added in place.
   */
  headGradientColumns?: number;
  /**
   * Memory for the weights (ParameterStoreOptions.values): one copy that
   * every rank of a process reads. The model still initialises them from
   * `seed`, the same values on every rank.
   */
  parameterValues?: Float32Array;
  /**
   * Hold only this rank's slice of the weights (ParameterStoreOptions.shard,
   * ZeRO-3) and gather each layer's just before it runs; the Trainer installs
   * the gathering collective. Not with `parameterValues`.
   */
  shardOver?: { rank: number; ranks: number };
}

export interface GptForwardOptions {
  /** RoPE positions: the first token's (default 0), or every token's, int32 [b * s]. */
  positions?: RopePositions;
  /** Packed documents: each token's document id, int32 [b * s], non-decreasing per row. */
  documents?: Int32Array;
  /** Handed to every block's attention (BlockForwardOptions.attentionRun): a sharded attention's shard layout. */
  attentionRun?: unknown;
  /**
   * false: stop at the final norm; the context has `hFinal` and no logits
   * (apply the head with `lmHead()`, backpropagate with `backwardFromHidden`).
   * Default true.
   */
  logits?: boolean;
}

/**
 * Whether every block of these settings keeps only what `bfloat16Checkpoints` stores in bf16, so that the option
 * applies: under activation checkpointing its input, with attention in head groups and a tiled MLP its input and the
 * MLP's input. The one rule the model, the trainer and the memory account read.
 */
export function storesBfloat16(settings: Pick<GptOptions, "activationCheckpointing" | "attentionHeadGroups" | "mlpTileRows">): boolean {
  return settings.activationCheckpointing === true || ((settings.attentionHeadGroups ?? 1) > 1 && (settings.mlpTileRows ?? 0) > 0);
}
