/**
 * The Qwen2 family (Qwen2, Qwen2.5 and their instruct models: model_type
 * "qwen2"), as Hugging Face's modeling_qwen2.py defines it: Llama's
 * pre-norm RMSNorm blocks, SwiGLU and grouped-query rotate-half RoPE, with
 * biases on the q, k and v projections (none on o nor the MLP).
 *
 * Read from config.json: vocab_size, hidden_size, intermediate_size,
 * num_hidden_layers, num_attention_heads, num_key_value_heads (required:
 * Hugging Face's default, 32, is not the heads), head_dim (default
 * hidden_size / num_attention_heads), max_position_embeddings (default
 * 32768), rms_norm_eps (1e-6), rope_theta (10000, or rope_parameters'),
 * tie_word_embeddings (false), hidden_act (silu). use_sliding_window true is
 * refused (sliding_window and max_window_layers change nothing without it),
 * as are RoPE scalings other than linear and llama3 and attention_dropout above 0.
 */
import type { GptConfig } from "../gpt-config.js";
import { configReader, evenSplit, headDimOf, ropeOf, tiedOf, type ConfigReader } from "./config-reader.js";
import { decoderTensorOf } from "./decoder-tensors.js";
import type { ModelFamily } from "./family.js";

/**
 * What Qwen2 and Qwen3 read alike: no sliding window, SwiGLU with silu, no
 * dropout, RoPE (ropeOf), the sizes (num_key_value_heads required), RMSNorm,
 * the tie; `headDim` gives the per-head width from the hidden size and heads.
 */
export function qwenDecoderConfig(
  json: Readonly<Record<string, unknown>>,
  file: string,
  headDim: (read: ConfigReader, hidden: number, heads: number) => number,
): { read: ConfigReader; config: GptConfig } {
  const read = configReader(json, file);
  const { int, number, refuse } = read;
  refuse("use_sliding_window", (v) => v === false || v === null, "sliding-window attention is not implemented yet");
  read.siluOnly();
  read.noDropout();
  const rope = ropeOf(read, json, file, 10000);
  const hidden = int("hidden_size");
  const heads = int("num_attention_heads");
  const width = headDim(read, hidden, heads);
  const mlpHidden = int("intermediate_size");
  const config: GptConfig = {
    vocab: int("vocab_size"),
    hidden,
    heads,
    kvHeads: json.num_key_value_heads === null ? heads : int("num_key_value_heads"),
    layers: int("num_hidden_layers"),
    mlp: "swiglu",
    mlpRatio: mlpHidden / hidden,
    mlpHidden,
    maxSeq: int("max_position_embeddings", 32768),
    tiedHead: tiedOf(read),
    norm: "rmsnorm",
    eps: number("rms_norm_eps", 1e-6),
    ...rope,
    ...(width === hidden / heads ? {} : { headDim: width }),
  };
  return { read, config };
}

export const qwen2Family: ModelFamily = {
  name: "qwen2",
  modelTypes: ["qwen2"],
  configFrom(json, file) {
    const { config } = qwenDecoderConfig(json, file, (read, hidden, heads) => headDimOf(read, json, () => evenSplit(read, hidden, heads)));
    return { ...config, attentionBias: "qkv" } satisfies GptConfig;
  },
  tensorOf: (parameter, config) => decoderTensorOf("qwen2", parameter, config),
};
