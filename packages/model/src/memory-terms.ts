/**
 * The model's own terms of a training run's memory account, per replica of
 * the weights: the fp32 weights, and the flat gradient with one layer's
 * gradient besides it (a block's backward makes its gradients in one flat
 * buffer before they are added into the model's).
 */
import { gptParamSpecs, parameterCount, type GptConfig } from "./gpt-config.js";

export interface ParameterMemory {
  parameters: number;
  /** fp32 weights. */
  weightBytes: number;
  /** The flat gradient and one layer's. */
  gradientBytes: number;
  /** Parameters of the blocks (`blocks.*`, one contiguous run), and of one block. */
  blockParameters: number;
  layerParameters: number;
}

/** Bytes of one replica's weights and gradients. */
export function parameterMemory(config: GptConfig): ParameterMemory {
  const parameters = parameterCount(config);
  let blockParameters = 0;
  for (const spec of gptParamSpecs(config)) if (spec.name.startsWith("blocks.")) blockParameters += spec.shape.reduce((a, b) => a * b, 1);
  const layerParameters = blockParameters / config.layers;
  return { parameters, weightBytes: 4 * parameters, gradientBytes: 4 * (parameters + layerParameters), blockParameters, layerParameters };
}
