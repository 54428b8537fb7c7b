/**
 * The model's own terms of a training run's memory account, per replica of
 * the weights: the fp32 weights, and the flat gradient with one layer's
 * gradient besides it (a block's backward makes its gradients in one flat
 * buffer before they are added into the model's).
 */
import { parameterCount, type GptConfig } from "./gpt-config.js";

export interface ParameterMemory {
  parameters: number;
  /** fp32 weights. */
  weightBytes: number;
  /** The flat gradient and one layer's. */
  gradientBytes: number;
}

/** Bytes of one replica's weights and gradients. */
export function parameterMemory(config: GptConfig): ParameterMemory {
  const parameters = parameterCount(config);
  const embeddings = config.vocab * config.hidden * (config.tiedHead ? 1 : 2);
  const layerParameters = (parameters - embeddings) / config.layers;
  return { parameters, weightBytes: 4 * parameters, gradientBytes: 4 * (parameters + layerParameters) };
}
