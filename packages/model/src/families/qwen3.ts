/**
 * The Qwen3 family (the dense Qwen3 models: model_type "qwen3"), as Hugging
 * Face's modeling_qwen3.py defines it: Llama's pre-norm RMSNorm blocks,
 * SwiGLU and grouped-query rotate-half RoPE, with an RMSNorm over each head
 * of q and of k after their projections and before RoPE (weights q_norm and
 * k_norm [head_dim], the blocks' rms_norm_eps), and a head width of its own
 * (head_dim, not hidden_size / num_attention_heads: Qwen3-0.6B has 16 heads
 * of 128 on hidden 1024).
 *
 * Read from config.json: vocab_size, hidden_size, intermediate_size,
 * num_hidden_layers, num_attention_heads, num_key_value_heads (required),
 * head_dim (default 128, as Hugging Face's Qwen3Config), attention_bias
 * (false; true: biases on q, k, v and o), max_position_embeddings (32768),
 * rms_norm_eps (1e-6), rope_theta (10000, or rope_parameters'),
 * tie_word_embeddings (false), hidden_act (silu). use_sliding_window true is
 * refused (sliding_window, max_window_layers and layer_types change nothing
 * without it), as are RoPE scalings other than linear and llama3 and attention_dropout above 0.
 */
import type { GptConfig } from "../gpt-config.js";
import { headDimOf } from "./config-reader.js";
import { qwenDecoderConfig } from "./qwen2.js";
import { decoderTensorOf } from "./decoder-tensors.js";
import type { ModelFamily } from "./family.js";

export const qwen3Family: ModelFamily = {
  name: "qwen3",
  modelTypes: ["qwen3"],
  configFrom(json, file) {
    const { read, config } = qwenDecoderConfig(json, file, (r) => headDimOf(r, json, () => 128));
    // Qwen3's head width is its own even where it equals hidden / heads: kept explicit
    const headDim = config.headDim ?? config.hidden / config.heads;
    return { ...config, headDim, attentionBias: read.boolean("attention_bias", false) ? "qkvo" : "none", qkNorm: true } satisfies GptConfig;
  },
  tensorOf: (parameter, config) => decoderTensorOf("qwen3", parameter, config),
};
