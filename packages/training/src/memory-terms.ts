/**
 * Training's own terms of a run's memory account: the fp32 model state each
 * rank holds at a ZeRO stage (weights, gradients, AdamW's moments m and v),
 * exactly as the Trainer allocates it, and AdamW's moments over the ranks on
 * one machine.
 *
 * Over a gradient group of R ranks, rank r owning slice s_r of the P
 * parameters (evenSplitSizes), E of them outside the blocks:
 *
 * | stage | weights | gradients held | through the loss only | moments |
 * |---|---|---|---|---|
 * | 0 | P | P | 0 | 2P |
 * | 1 | P | P | 0 | 2 s_r |
 * | 2 | P | s_r | E | 2 s_r |
 * | 3 | s_r + gathered | s_r | E + H | 2 s_r |
 *
 * ZeRO-3 over more than one rank holds its slice of the weights and gathers
 * the rest as it reads them: two layers' weights (the model's staging
 * buffers, min(2, L) x the layer's Λ) and the final norm's N, held through
 * the step, and through the loss the head's H (the embedding when tied).
 * The embedding's lookup gathers the table for the lookup alone (not held).
 *
 * With shared weights the ranks of one process read one copy of P. Stage 2
 * streams only over more than one rank (alone, a rank's slice is everything
 * and nothing is streamed); its E gradients outside the blocks are held from
 * the loss until the first block's gradient (then reduce-scattered into the
 * slices and dropped), and again from the embedding's backward to the step's
 * end, in a new buffer of which only the rows of the rank's tokens are
 * written. Besides these a block's backward makes one layer's gradient
 * (ParameterMemory.layerParameters), ZeRO-1's step a transient s_r once the
 * backward is done, and ZeRO-2's exchange a scratch of at most
 * EXCHANGE_CHUNK_BYTES.
 */
import { evenSplitSizes } from "@ulysses/tensors";
import { TrainingError } from "./errors.js";

/** Elements of fp32 model state one rank holds (its weights counted whole even when shared). */
export interface RankStateFloats {
  weights: number;
  /** ZeRO-3's gathered weights held through the step (two layers' staging buffers and the final norm's). */
  gatheredWeights: number;
  /** ZeRO-3's head weight, gathered for the loss alone. */
  lossPhaseWeights: number;
  /** Held through the blocks' backward and between steps. */
  gradients: number;
  /** Held besides `gradients` from the loss until the blocks run backward (ZeRO-2's gradients outside the blocks). */
  lossPhaseGradients: number;
  moments: number;
}

/** What a rank's state depends on: the model's parameters, those outside the blocks, the gradient group and the stage. */
export interface RankStateInput {
  parameters: number;
  /** Parameters outside the blocks (the embedding, the final norm, an untied head). */
  edgeParameters: number;
  /** Ranks of the gradient group, and this rank's place in it. */
  groupSize: number;
  rank: number;
  zero: number;
  /** What ZeRO-3 gathers (needed for stage 3 over more than one rank): one layer's parameters, the layers, the final norm's and the head's. */
  gathered?: { layer: number; layers: number; finalNorm: number; head: number };
}

/** The elements of weights, held gradients (through the blocks' backward, and the loss's alone) and moments of `rank` (see the table above). */
export function rankStateFloats(input: RankStateInput): RankStateFloats {
  const { parameters, edgeParameters, groupSize, rank, zero } = input;
  const slice = zero > 0 ? evenSplitSizes(parameters, groupSize)[rank]! : parameters;
  const streamed = zero >= 2 && groupSize > 1;
  const sharded = zero === 3 && groupSize > 1;
  const g = input.gathered;
  if (sharded && g === undefined) throw new TrainingError("rankStateFloats: ZeRO-3 over more than one rank needs what it gathers (`gathered`)");
  return {
    weights: sharded ? slice : parameters,
    gatheredWeights: sharded ? Math.min(2, g!.layers) * g!.layer + g!.finalNorm : 0,
    lossPhaseWeights: sharded ? g!.head : 0,
    gradients: streamed ? slice : parameters,
    lossPhaseGradients: streamed ? edgeParameters : 0,
    moments: 2 * slice,
  };
}

/**
 * Bytes of AdamW's moments over `ranks` ranks holding `parameters` each
 * (sharded: one pair over them all; a checkpoint streams the slices through
 * a 4 MiB part, gathering nothing).
 */
export function adamwMomentBytes(parameters: number, ranks: number, sharded: boolean): number {
  const pair = 2 * 4 * parameters;
  return sharded ? pair : ranks * pair;
}
