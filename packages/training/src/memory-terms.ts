/**
 * Training's own terms of a run's memory account: the fp32 model state each
 * rank holds at a ZeRO stage (weights, gradients, AdamW's moments m and v),
 * exactly as the Trainer allocates it, and AdamW's moments over the ranks on
 * one machine.
 *
 * Over a gradient group of R ranks, rank r owning slice s_r of the P
 * parameters (evenSplitSizes), E of them outside the blocks:
 *
 * | stage | weights | gradients held | moments |
 * |---|---|---|---|
 * | 0 | P | P | 2P |
 * | 1 | P | P | 2 s_r |
 * | 2 | P | E + s_r | 2 s_r |
 *
 * With shared weights the ranks of one process read one copy of P. Stage 2
 * holds E + s_r only over more than one rank (alone, a rank's slice is
 * everything and nothing is streamed). Besides these a block's backward makes
 * one layer's gradient (ParameterMemory.layerParameters), ZeRO-1's step a
 * transient s_r once the backward is done, and ZeRO-2's exchange a scratch
 * of at most EXCHANGE_CHUNK_BYTES.
 */
import { evenSplitSizes } from "@ulysses/tensors";

/** Elements of fp32 model state one rank holds (its weights counted whole even when shared). */
export interface RankStateFloats {
  weights: number;
  gradients: number;
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
}

/** The elements of weights, held gradients and moments of `rank` (see the table above). */
export function rankStateFloats(input: RankStateInput): RankStateFloats {
  const { parameters, edgeParameters, groupSize, rank, zero } = input;
  const slice = zero > 0 ? evenSplitSizes(parameters, groupSize)[rank]! : parameters;
  const streamed = zero === 2 && groupSize > 1;
  return { weights: parameters, gradients: streamed ? edgeParameters + slice : parameters, moments: 2 * slice };
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
