/**
 * Model FLOPs utilisation: the model's FLOPs per step, counted by
 * @ulysses/measure from the GPT's dimensions (2 FLOPs per matrix weight per
 * token, causal attention over its N(N+1)/2 pairs or, for packed documents,
 * the pairs their masks attend, counted per step, so that a step of many short
 * documents does not read as a faster machine; training = 3 forwards),
 * against the MatMul rate @ulysses/measure's `measureMatmulRate` finds at
 * start-up with all cores: the fastest of 4 rounds of at least 100 ms, the
 * rate the machine sustains for about as long as a step (on a loaded machine
 * that rate is low and the MFU optimistic).
 */
import { gptTrainingFlops, gptTrainingFlopsOverPairs, type GptDimensions } from "@ulysses/measure";
import { blockConfigOf, mlpComponent, type GptConfig } from "@ulysses/model";

/** The sizes the FLOP count reads, from the model's configuration (grouped-query k and v, SwiGLU's three MLP matrices, the LM head tied or not). */
export function gptDimensionsOf(config: GptConfig): GptDimensions {
  const block = blockConfigOf(config);
  return {
    layers: config.layers,
    hidden: config.hidden,
    vocab: config.vocab,
    mlpHidden: block.mlpHidden,
    kvWidth: block.kvHeads * block.headDim,
    qWidth: block.heads * block.headDim,
    gatedMlp: mlpComponent(block.mlp).projections.length > 1,
  };
}

/** FLOPs of one training step (forward and backward) over `tokens` tokens of causal sequences of `seq`. */
export function modelFlopsPerStep(config: GptConfig, tokens: number, seq: number): number {
  return gptTrainingFlops(gptDimensionsOf(config), seq, true, tokens / seq);
}

/** FLOPs of one training step over `tokens` tokens of packed documents whose masked attention covers `pairs` pairs per head (documentPairs). */
export function modelFlopsOverPairs(config: GptConfig, tokens: number, pairs: number): number {
  return gptTrainingFlopsOverPairs(gptDimensionsOf(config), tokens, pairs);
}
