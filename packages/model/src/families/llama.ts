/**
 * The Llama family: Llama 2, 3, 3.1, 3.2, SmolLM, and Mistral without a
 * sliding window (model_type "llama" or "mistral"). Pre-norm blocks with
 * RMSNorm, SwiGLU, grouped-query attention and rotate-half RoPE, no biases,
 * as Hugging Face's modeling_llama.py defines them.
 *
 * Read from config.json: vocab_size, hidden_size, intermediate_size,
 * num_hidden_layers, num_attention_heads, num_key_value_heads (default the
 * heads), head_dim (default hidden_size / num_attention_heads; any even
 * width), max_position_embeddings, rms_norm_eps, rope_theta, rope_scaling
 * (linear, llama3, yarn: rope-scaling.ts; rope_parameters with plain RoPE),
 * tie_word_embeddings, hidden_act (silu), attention_bias (llama: biases on
 * q, k, v and o) and mlp_bias (llama: on gate, up and down). Refused by name
 * until supported: other RoPE scalings, a sliding_window shorter than
 * max_position_embeddings (Mistral's default, 4096, when the key is absent),
 * pretraining_tp above 1, attention_bias or mlp_bias true for Mistral (whose
 * Hugging Face model has no biases), attention_dropout above 0.
 */
import { ModelError } from "../errors.js";
import type { GptConfig } from "../gpt-config.js";
import { configReader, evenSplit, headDimOf, ropeOf } from "./config-reader.js";
import { decoderTensorOf } from "./decoder-tensors.js";
import type { ModelFamily } from "./family.js";

export const llamaFamily: ModelFamily = {
  name: "llama",
  modelTypes: ["llama", "mistral"],
  configFrom(json, file) {
    const read = configReader(json, file);
    const { int, number, boolean, refuse, where } = read;
    const mistral = json.model_type === "mistral";
    if (mistral) {
      refuse("attention_bias", (v) => v === false || v === null, "Hugging Face's Mistral has no biases on its attention projections");
      refuse("mlp_bias", (v) => v === false || v === null, "Hugging Face's Mistral has no biases on its MLP projections");
    }
    read.noDropout();
    refuse("pretraining_tp", (v) => v === 1, "only pretraining_tp 1 is read (its slices change the rounding of the projections)");
    read.siluOnly();
    const rope = ropeOf(read, json, file, 10000);
    const hidden = int("hidden_size");
    const heads = int("num_attention_heads");
    const headDim = headDimOf(read, json, () => evenSplit(read, hidden, heads));
    const tied = boolean("tie_word_embeddings", false);
    const maxSeq = int("max_position_embeddings", 2048);
    // a window at least as long as any sequence the model reads changes nothing; Hugging Face's MistralConfig defaults it to 4096
    const window = "sliding_window" in json ? json.sliding_window : json.model_type === "mistral" ? 4096 : null;
    if (window !== null && !(Number.isSafeInteger(window) && (window as number) >= maxSeq))
      throw new ModelError(
        `${where("sliding_window")} ${JSON.stringify(window)} is not supported: sliding-window attention shorter than max_position_embeddings (${maxSeq}) is not implemented yet`,
      );
    const mlpHidden = int("intermediate_size");
    return {
      vocab: int("vocab_size"),
      hidden,
      heads,
      kvHeads: int("num_key_value_heads", heads),
      layers: int("num_hidden_layers"),
      mlp: "swiglu",
      mlpRatio: mlpHidden / hidden,
      mlpHidden,
      maxSeq,
      tiedHead: tied,
      norm: "rmsnorm",
      eps: number("rms_norm_eps", 1e-6),
      ...rope,
      ...(headDim === hidden / heads ? {} : { headDim }),
      ...(boolean("attention_bias", false) ? { attentionBias: "qkvo" as const } : {}),
      ...(boolean("mlp_bias", false) ? { mlpBias: true } : {}),
    } satisfies GptConfig;
  },
  tensorOf: (parameter, config) => decoderTensorOf("llama", parameter, config),
};
