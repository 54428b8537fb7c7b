/**
 * The Llama family: Llama 2, 3, 3.1, 3.2, SmolLM, and Mistral without a
 * sliding window (model_type "llama" or "mistral"). Pre-norm blocks with
 * RMSNorm, SwiGLU, grouped-query attention and rotate-half RoPE, no biases,
 * as Hugging Face's modeling_llama.py defines them.
 *
 * Read from config.json: vocab_size, hidden_size, intermediate_size,
 * num_hidden_layers, num_attention_heads, num_key_value_heads (default the
 * heads), head_dim (must be hidden_size / num_attention_heads),
 * max_position_embeddings, rms_norm_eps, rope_theta, rope_scaling (linear,
 * llama3: rope-scaling.ts), tie_word_embeddings, hidden_act (silu). Refused
 * by name until supported: other RoPE scalings,
 * attention_bias and mlp_bias true, a sliding_window shorter than
 * max_position_embeddings (Mistral's default, 4096, when the key is absent),
 * pretraining_tp above 1.
 */
import { ModelError } from "../errors.js";
import type { GptConfig } from "../gpt-config.js";
import type { ModelFamily } from "./family.js";
import { ropeScalingFrom } from "./rope-scaling.js";

function reader(json: Readonly<Record<string, unknown>>, file: string) {
  const where = (key: string) => `config '${file}': ${key}`;
  const shown = (value: unknown) => JSON.stringify(value)?.slice(0, 80) ?? String(value);
  const int = (key: string, fallback?: number): number => {
    const value = json[key] ?? fallback;
    if (!Number.isSafeInteger(value) || (value as number) < 1) throw new ModelError(`${where(key)} must be a positive integer, got ${shown(value)}`);
    return value as number;
  };
  const number = (key: string, fallback: number): number => {
    const value = json[key] ?? fallback;
    if (typeof value !== "number" || !Number.isFinite(value) || value <= 0)
      throw new ModelError(`${where(key)} must be a positive number, got ${shown(value)}`);
    return value;
  };
  const refuse = (key: string, allowed: (value: unknown) => boolean, why: string) => {
    if (key in json && !allowed(json[key])) throw new ModelError(`${where(key)} ${shown(json[key])} is not supported: ${why}`);
  };
  return { int, number, refuse, where, shown };
}

const LAYER = /^blocks\.(\d+)\.(.+)$/;
const LAYER_TENSORS: Record<string, string> = {
  "norm1.gamma": "input_layernorm.weight",
  "attn.q.w": "self_attn.q_proj.weight",
  "attn.k.w": "self_attn.k_proj.weight",
  "attn.v.w": "self_attn.v_proj.weight",
  "attn.o.w": "self_attn.o_proj.weight",
  "norm2.gamma": "post_attention_layernorm.weight",
  "mlp.gate.w": "mlp.gate_proj.weight",
  "mlp.up.w": "mlp.up_proj.weight",
  "mlp.down.w": "mlp.down_proj.weight",
};

export const llamaFamily: ModelFamily = {
  name: "llama",
  modelTypes: ["llama", "mistral"],
  configFrom(json, file) {
    const { int, number, refuse, where } = reader(json, file);
    refuse("attention_bias", (v) => v === false, "biases on the attention projections are not implemented yet");
    refuse("mlp_bias", (v) => v === false, "biases on the MLP projections are not implemented yet");
    refuse("pretraining_tp", (v) => v === 1, "only pretraining_tp 1 is read (its slices change the rounding of the projections)");
    refuse("hidden_act", (v) => v === "silu", "the MLP is SwiGLU, silu(gate) x up");
    const hidden = int("hidden_size");
    const heads = int("num_attention_heads");
    if (hidden % heads !== 0) throw new ModelError(`${where("hidden_size")} ${hidden} is not divisible by num_attention_heads ${heads}`);
    refuse(
      "head_dim",
      (v) => v === null || v === hidden / heads,
      `a head_dim other than hidden_size / num_attention_heads (${hidden / heads}) is not implemented yet`,
    );
    const tied = json.tie_word_embeddings ?? false;
    if (typeof tied !== "boolean") throw new ModelError(`${where("tie_word_embeddings")} must be true or false, got ${JSON.stringify(tied)}`);
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
      ropeBase: number("rope_theta", 10000),
      ropeScaling: ropeScalingFrom(json, file),
    } satisfies GptConfig;
  },
  tensorOf(parameter, config) {
    if (parameter === "embed.weight") return { name: "model.embed_tokens.weight", transposed: false };
    if (parameter === "norm.gamma") return { name: "model.norm.weight", transposed: false };
    if (parameter === "head.w" && !config.tiedHead) return { name: "lm_head.weight", transposed: true };
    const layer = LAYER.exec(parameter);
    const tensor = layer === null ? undefined : LAYER_TENSORS[layer[2]!];
    if (layer === null || tensor === undefined) throw new ModelError(`the llama family has no tensor for parameter '${parameter}'`);
    return { name: `model.layers.${layer[1]}.${tensor}`, transposed: layer[2]!.endsWith(".w") };
  },
};
