/**
 * This library's own GPT as a model family (model_type "ulysses_gpt"), so a
 * run can write a Hugging Face style directory (hf/) that ulysses-generate
 * and importWeights read back: config.json holds every GptConfig field under
 * the keys below (configTo writes them, configFrom reads them and refuses
 * any other key by name), and the tensors keep our parameter names, with
 * matrices (names ending ".w") stored [out, in] as nn.Linear stores them.
 */
import { mlpNames, normNames } from "@ulysses/block";
import { ModelError } from "../errors.js";
import { validateGptConfig, type GptConfig } from "../gpt-config.js";
import type { ModelFamily } from "./family.js";

/** GptConfig field -> its config.json key. */
const KEYS = {
  vocab: "vocab_size",
  hidden: "hidden_size",
  heads: "num_attention_heads",
  kvHeads: "num_key_value_heads",
  layers: "num_hidden_layers",
  mlp: "mlp",
  mlpRatio: "mlp_ratio",
  maxSeq: "max_position_embeddings",
  tiedHead: "tie_word_embeddings",
  norm: "norm",
  mlpHidden: "intermediate_size",
  eps: "norm_eps",
  ropeBase: "rope_theta",
  /** In this library's own form ({ type, factor, ... }), checked by validateGptConfig. */
  ropeScaling: "rope_scaling",
  headDim: "head_dim",
  /** "none", "qkv" or "qkvo", as GptConfig has it. */
  attentionBias: "attention_bias",
  mlpBias: "mlp_bias",
  qkNorm: "qk_norm",
} as const satisfies Record<keyof GptConfig, string>;

const REQUIRED = ["vocab", "hidden", "heads", "kvHeads", "layers", "mlp", "mlpRatio", "maxSeq", "tiedHead"] as const;

/** Keys Hugging Face tooling writes into any config.json, which change nothing here. */
const BOOKKEEPING = new Set(["model_type", "architectures", "torch_dtype", "transformers_version", "bos_token_id", "eos_token_id", "pad_token_id"]);

export const GPT_MODEL_TYPE = "ulysses_gpt";

export const gptFamily: ModelFamily & { configTo(config: GptConfig): Record<string, unknown> } = {
  name: "gpt",
  modelTypes: [GPT_MODEL_TYPE],
  configFrom(json, file) {
    const fields = new Map<string, keyof GptConfig>(Object.entries(KEYS).map(([field, key]) => [key, field as keyof GptConfig]));
    const config: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(json)) {
      const field = fields.get(key);
      if (field !== undefined) config[field] = value;
      else if (!BOOKKEEPING.has(key))
        throw new ModelError(`config '${file}': ${key} is not a key of a ${GPT_MODEL_TYPE} config (${Object.values(KEYS).join(", ")})`);
    }
    for (const field of REQUIRED) if (!(field in config)) throw new ModelError(`config '${file}': ${KEYS[field]} is missing`);
    if (typeof config.mlp !== "string" || !mlpNames().includes(config.mlp))
      throw new ModelError(`config '${file}': mlp ${JSON.stringify(config.mlp)} is not a registered MLP (${mlpNames().join(", ")})`);
    if (config.norm !== undefined && (typeof config.norm !== "string" || !normNames().includes(config.norm)))
      throw new ModelError(`config '${file}': norm ${JSON.stringify(config.norm)} is not a registered norm (${normNames().join(", ")})`);
    try {
      validateGptConfig(config as unknown as GptConfig);
    } catch (cause) {
      throw new ModelError(`config '${file}': ${(cause as Error).message}`, { cause });
    }
    return config as unknown as GptConfig;
  },
  configTo(config) {
    validateGptConfig(config);
    const json: Record<string, unknown> = { model_type: GPT_MODEL_TYPE, architectures: ["UlyssesGpt"] };
    for (const [field, value] of Object.entries(config)) {
      if (value === undefined) continue;
      const key = (KEYS as Record<string, string>)[field];
      if (key === undefined) throw new ModelError(`the ${GPT_MODEL_TYPE} config has no key for the GptConfig field '${field}' yet`);
      json[key] = value;
    }
    return json;
  },
  tensorOf(parameter) {
    return { name: parameter, transposed: parameter.endsWith(".w") };
  },
};
