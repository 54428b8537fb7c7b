/**
 * One layer's memory per local token under sequence parallelism, in floats:
 * what a block keeps for backward, recomputes, and works with in backward,
 * and the exchange scratch; the scheme's own part (the width of k and v as
 * its local kernel sees them, its exchange areas) comes from its descriptor.
 * The trainer's memory preflight and `pnpm bench:memory` multiply these by
 * tokens and layers (see @ulysses/training memory-account.ts for what is counted).
 */
import { normComponent, mlpComponent } from "@ulysses/block";
import { blockConfigOf, type GptConfig } from "@ulysses/model";
import type { SequenceParallelKind } from "./parallel-dims.js";
import { sequenceParallelScheme } from "./scheme-registry.js";

export interface LayerFloats {
  /** Floats per token one block's forward keeps for backward. */
  saved: number;
  /** Floats per token of the attention half a checkpointed block recomputes in backward. */
  recomputed: number;
  /** Floats per token of one block's backward working set (gradients alive together, the largest op's temporaries). */
  backward: number;
  /** Floats per token of the exchange scratch (0 without exchanges). */
  exchange: number;
  /** The share of an exchanged tensor that travels (the rest, a rank's own block, is copied straight across). */
  travels: number;
  /** Floats per row of one MLP tile's working set (tiled MLP). */
  mlpTile: number;
  /**
   * Floats per token of the head groups' outputs and log-sum-exps kept for backward (keepAttentionOutputs), float32
   * whatever the blocks keep the rest in; 0 when they are not kept. Not part of `saved`.
   */
  keptOutputs: number;
}

/** Floats per token that one layer keeps, recomputes and works with. */
export function layerFloatsPerToken(
  model: GptConfig,
  sp: number,
  kind: SequenceParallelKind,
  ulyssesDegree = sequenceParallelScheme(kind).resolve({ sp }, blockConfigOf(model).kvHeads).ulyssesDegree,
  tiledMlp = false,
  attentionHeadGroups = 1,
  keepAttentionOutputs = false,
): LayerFloats {
  const block = blockConfigOf(model);
  const { hidden, heads, kvHeads, headDim, mlpHidden } = block;
  const scheme = sequenceParallelScheme(kind).memory({
    sp,
    kvHeads,
    headDim,
    degrees: { ulyssesDegree, ringDegree: sp / ulyssesDegree },
    // the block's head groups (memory tiling) are not the scheme's pipeline chunks: its widths do not depend on either
    pipelineChunks: 1,
  });
  const qWidth = heads * headDim;
  // k and v as the local kernel sees them, per local token (the scheme's own term)
  const kvWidth = scheme.kvWidth;
  const moved = sp > 1; // an exchange moved q, k, v (and out back): the output exists in both layouts
  const normStats = normComponent(block.norm).statsPerRow;
  const mlpTensors = mlpComponent(block.mlp).projections.length + 1; // up (and gate), activation
  // qkNorm (Qwen3): the per-head norms keep their inputs (q's and k's projections, in the rank's own layout) and one statistic
  // per head; their backward makes one more gradient of q's width besides RoPE's
  const ownKv = kvHeads * headDim;
  const qkNormSaved = block.qkNorm ? qWidth + ownKv + heads + kvHeads : 0;
  const qkNormBackward = block.qkNorm ? qWidth : 0;
  const attentionHalf =
    hidden + // h1 (norm1's output), the q, k, v projections' input
    normStats +
    qWidth + // q
    2 * kvWidth + // k, v
    qWidth + // out
    heads + // log-sum-exp
    (moved ? qWidth : 0) + // out in the rank's own layout, the o projection's input
    hidden + // x2, the MLP's input (and the residual)
    qkNormSaved;
  const mlpHalf = hidden + normStats + mlpTensors * mlpHidden; // h2 and its statistics, up (and gate), activation
  const saved = hidden + attentionHalf + (tiledMlp ? 0 : mlpHalf);
  // backward: the MLP's gradients (dy, dAct, dUp (and dGate)) and the largest op's temporaries (one MLP-wide
  // tensor) unless tiled; then the attention's (dx2, dAttn, dq, dk, dv and RoPE's dq, dk)
  const mlpBackward = hidden + (mlpTensors + 1) * mlpHidden;
  const attentionBackward = hidden + qWidth + qWidth + 2 * kvWidth + qWidth + kvWidth + qkNormBackward;
  const backward = tiledMlp ? attentionBackward : Math.max(mlpBackward, attentionBackward);
  // (a tiled MLP's backward works on one tile at a time, before the attention's gradients exist: see mlpTile)
  // send and receive areas of q, k, v (reused for out and the gradients), of which the fraction that travels (a rank's own
  // block of an all-to-all is copied straight across)
  const travels = scheme.travels;
  const exchange = moved && scheme.exchangeAreas ? 2 * (qWidth + 2 * kvWidth) * travels : 0;
  const mlpTile = hidden + (mlpTensors + 1) * mlpHidden + mlpHidden; // h2, up (and gate), activation, dAct and the op temporaries of a tile
  if (attentionHeadGroups === 1) return { saved, recomputed: attentionHalf, backward, exchange, travels, mlpTile, keptOutputs: 0 };
  // head groups (TransformerBlock attentionHeadGroups): the attention half keeps nothing but x2; its backward holds h1 and norm1's
  // statistics, dx2 (in dy's buffer), dh1 (one group's term of it exists for a row tile at a time: a constant, headGroupTileRowsOf),
  // and one group's recomputed forward (q and k before and after RoPE, v, out and its own-layout copy, log-sum-exp) and gradients
  // (dOut, dq, dk, dv, RoPE's dq and dk, dq|dk|dv side by side)
  // (and, with qkNorm, its per-head norms' inputs and statistics, and their gradient of q's width)
  const groupForward = (2 * qWidth + 3 * kvWidth + qWidth + heads + (moved ? qWidth : 0) + qkNormSaved) / attentionHeadGroups;
  const groupBackward = (4 * qWidth + 5 * kvWidth + qkNormBackward) / attentionHeadGroups;
  const groupedBackward = 2 * hidden + groupForward + groupBackward;
  return {
    saved: 2 * hidden + (tiledMlp ? 0 : mlpHalf),
    recomputed: hidden + normStats,
    backward: tiledMlp ? groupedBackward : Math.max(mlpBackward, groupedBackward),
    exchange: exchange / attentionHeadGroups,
    travels,
    mlpTile,
    // every group's output in the rank's own layout, and its log-sum-exp (the rank's heads over the whole sequence: heads per local token)
    keptOutputs: keepAttentionOutputs ? qWidth + heads : 0,
  };
}
