/**
 * The qwen2 and qwen3 families against Qwen2.5-0.5B's and Qwen3-0.6B's
 * config.json fields and parameter counts (494,032,768 and 596,049,920, as
 * Hugging Face lists them; counted by hand in the comments), their tensor
 * names (Hugging Face's modeling_qwen2.py / modeling_qwen3.py), and what
 * they refuse, each naming the file and the key.
 */
import { describe, expect, it } from "vitest";
import { blockConfigOf, gptParamSpecs, parameterCount, validateGptConfig, type GptConfig } from "../gpt-config.js";
import { modelFamilyOf } from "./family.js";
import { qwen2Family } from "./qwen2.js";
import { qwen3Family } from "./qwen3.js";

const qwen25 = {
  architectures: ["Qwen2ForCausalLM"],
  attention_dropout: 0.0,
  bos_token_id: 151643,
  eos_token_id: 151643,
  hidden_act: "silu",
  hidden_size: 896,
  initializer_range: 0.02,
  intermediate_size: 4864,
  max_position_embeddings: 32768,
  max_window_layers: 24,
  model_type: "qwen2",
  num_attention_heads: 14,
  num_hidden_layers: 24,
  num_key_value_heads: 2,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000.0,
  sliding_window: 32768,
  tie_word_embeddings: true,
  torch_dtype: "bfloat16",
  use_cache: true,
  use_sliding_window: false,
  vocab_size: 151936,
};

const qwen3 = {
  architectures: ["Qwen3ForCausalLM"],
  attention_bias: false,
  attention_dropout: 0.0,
  bos_token_id: 151643,
  eos_token_id: 151645,
  head_dim: 128,
  hidden_act: "silu",
  hidden_size: 1024,
  initializer_range: 0.02,
  intermediate_size: 3072,
  max_position_embeddings: 40960,
  max_window_layers: 28,
  model_type: "qwen3",
  num_attention_heads: 16,
  num_hidden_layers: 28,
  num_key_value_heads: 8,
  rms_norm_eps: 1e-6,
  rope_scaling: null,
  rope_theta: 1000000,
  sliding_window: null,
  tie_word_embeddings: true,
  torch_dtype: "bfloat16",
  use_cache: true,
  use_sliding_window: false,
  vocab_size: 151936,
};

const layerTensors = (family: typeof qwen2Family, config: GptConfig) =>
  gptParamSpecs({ ...config, layers: 1, tiedHead: false })
    .filter((s) => s.name.startsWith("blocks.0."))
    .map((s) => {
      const t = family.tensorOf(s.name, config);
      return `${t.name.replace("model.layers.0.", "")} [${s.shape.join(", ")}]${t.transposed ? " (transposed)" : ""}`;
    });

describe("the qwen2 family", () => {
  it("reads Qwen2.5-0.5B's config.json: q, k, v biases, GQA, tied (494,032,768 parameters)", () => {
    const family = modelFamilyOf(qwen25, "qwen2.5/config.json");
    expect(family.name).toBe("qwen2");
    const config = family.configFrom(qwen25, "qwen2.5/config.json");
    expect(config).toEqual({
      vocab: 151936,
      hidden: 896,
      heads: 14,
      kvHeads: 2,
      layers: 24,
      mlp: "swiglu",
      mlpRatio: 4864 / 896,
      mlpHidden: 4864,
      maxSeq: 32768,
      tiedHead: true,
      norm: "rmsnorm",
      eps: 1e-6,
      ropeBase: 1e6,
      attentionBias: "qkv",
    } satisfies GptConfig);
    validateGptConfig(config);
    expect(blockConfigOf(config).headDim).toBe(64);
    // embedding 151936 x 896 = 136,134,656; a layer: q 896 x 896 + 896, k and v 896 x 128 + 128 each, o 896 x 896,
    // MLP 3 x 896 x 4864, two norms 896: 14,912,384, x 24 = 357,897,216; the final norm 896
    expect(parameterCount(config)).toBe(494_032_768);
    expect(layerTensors(qwen2Family, config)).toEqual([
      "input_layernorm.weight [896]",
      "self_attn.q_proj.weight [896, 896] (transposed)",
      "self_attn.q_proj.bias [896]",
      "self_attn.k_proj.weight [896, 128] (transposed)",
      "self_attn.k_proj.bias [128]",
      "self_attn.v_proj.weight [896, 128] (transposed)",
      "self_attn.v_proj.bias [128]",
      "self_attn.o_proj.weight [896, 896] (transposed)",
      "post_attention_layernorm.weight [896]",
      "mlp.gate_proj.weight [896, 4864] (transposed)",
      "mlp.up_proj.weight [896, 4864] (transposed)",
      "mlp.down_proj.weight [4864, 896] (transposed)",
    ]);
  });

  it("refuses by name: use_sliding_window true, another activation, RoPE scaling, dropout, a missing kv head count", () => {
    const refused = (json: Record<string, unknown>) => () => qwen2Family.configFrom(json, "q/config.json");
    expect(refused({ ...qwen25, use_sliding_window: true })).toThrow(
      "config 'q/config.json': use_sliding_window true is not supported: sliding-window attention is not implemented yet",
    );
    expect(refused({ ...qwen25, hidden_act: "gelu" })).toThrow("config 'q/config.json': hidden_act \"gelu\" is not supported: the MLP is SwiGLU");
    expect(refused({ ...qwen25, rope_scaling: { type: "dynamic", factor: 4 } })).toThrow(
      /^config 'q\/config.json': rope_scaling.type "dynamic" is not supported/,
    );
    // Qwen2.5's model card's long-context setting is read
    expect(
      qwen2Family.configFrom({ ...qwen25, rope_scaling: { factor: 4.0, original_max_position_embeddings: 32768, type: "yarn" } }, "q/config.json").ropeScaling,
    ).toMatchObject({
      type: "yarn",
      factor: 4,
      originalMaxPositions: 32768,
    });
    expect(refused({ ...qwen25, rope_parameters: { rope_type: "yarn", rope_theta: 1e6, factor: 4 } })).toThrow(
      /^config 'q\/config.json': rope_parameters .* is not supported: only plain RoPE/,
    );
    expect(refused({ ...qwen25, partial_rotary_factor: 0.5 })).toThrow("config 'q/config.json': partial_rotary_factor 0.5 is not supported");
    expect(refused({ ...qwen25, attention_dropout: 0.1 })).toThrow("config 'q/config.json': attention_dropout 0.1 is not supported");
    const { num_key_value_heads: _, ...noKv } = qwen25;
    expect(refused(noKv)).toThrow("config 'q/config.json': num_key_value_heads must be a positive integer, got undefined");
    expect(refused({ ...qwen25, tie_word_embeddings: "yes" })).toThrow("config 'q/config.json': tie_word_embeddings must be true or false, got \"yes\"");
    // transformers 5's plain RoPE parameters are read
    const { rope_theta: __, ...v5 } = qwen25;
    expect(qwen2Family.configFrom({ ...v5, rope_parameters: { rope_type: "default", rope_theta: 5e5 } }, "c.json").ropeBase).toBe(5e5);
  });
});

describe("the qwen3 family", () => {
  it("reads Qwen3-0.6B's config.json: head_dim 128 on hidden 1024 with 16 heads, q/k norms, tied (596,049,920 parameters)", () => {
    const family = modelFamilyOf(qwen3, "qwen3/config.json");
    expect(family.name).toBe("qwen3");
    const config = family.configFrom(qwen3, "qwen3/config.json");
    expect(config).toEqual({
      vocab: 151936,
      hidden: 1024,
      heads: 16,
      kvHeads: 8,
      layers: 28,
      mlp: "swiglu",
      mlpRatio: 3,
      mlpHidden: 3072,
      maxSeq: 40960,
      tiedHead: true,
      norm: "rmsnorm",
      eps: 1e-6,
      ropeBase: 1e6,
      headDim: 128,
      attentionBias: "none",
      qkNorm: true,
    } satisfies GptConfig);
    validateGptConfig(config);
    // embedding 151936 x 1024 = 155,582,464; a layer: q 1024 x 2048, k and v 1024 x 1024, o 2048 x 1024, q/k norms 128 each,
    // MLP 3 x 1024 x 3072, two norms 1024: 15,730,944, x 28 = 440,466,432; the final norm 1024
    expect(parameterCount(config)).toBe(596_049_920);
    expect(layerTensors(qwen3Family, config)).toEqual([
      "input_layernorm.weight [1024]",
      "self_attn.q_proj.weight [1024, 2048] (transposed)",
      "self_attn.k_proj.weight [1024, 1024] (transposed)",
      "self_attn.v_proj.weight [1024, 1024] (transposed)",
      "self_attn.q_norm.weight [128]",
      "self_attn.k_norm.weight [128]",
      "self_attn.o_proj.weight [2048, 1024] (transposed)",
      "post_attention_layernorm.weight [1024]",
      "mlp.gate_proj.weight [1024, 3072] (transposed)",
      "mlp.up_proj.weight [1024, 3072] (transposed)",
      "mlp.down_proj.weight [3072, 1024] (transposed)",
    ]);
  });

  it("head_dim defaults to 128 (Qwen3Config's default); attention_bias puts biases on q, k, v and o", () => {
    const { head_dim: _, ...noHeadDim } = qwen3;
    expect(qwen3Family.configFrom({ ...noHeadDim, hidden_size: 512 }, "c.json").headDim).toBe(128);
    const config = qwen3Family.configFrom({ ...qwen3, attention_bias: true }, "c.json");
    expect(config.attentionBias).toBe("qkvo");
    expect(layerTensors(qwen3Family, config).filter((t) => t.includes(".bias"))).toEqual([
      "self_attn.q_proj.bias [2048]",
      "self_attn.k_proj.bias [1024]",
      "self_attn.v_proj.bias [1024]",
      "self_attn.o_proj.bias [1024]",
    ]);
  });

  it("refuses by name: use_sliding_window true, another activation, an odd head_dim, DeepSeek's YaRN keys", () => {
    const refused = (json: Record<string, unknown>) => () => qwen3Family.configFrom(json, "q3/config.json");
    expect(refused({ ...qwen3, use_sliding_window: true })).toThrow("config 'q3/config.json': use_sliding_window true is not supported");
    expect(refused({ ...qwen3, hidden_act: "gelu_pytorch_tanh" })).toThrow("config 'q3/config.json': hidden_act \"gelu_pytorch_tanh\" is not supported");
    expect(refused({ ...qwen3, head_dim: 63 })).toThrow("config 'q3/config.json': head_dim 63 is not supported: RoPE needs an even head width");
    expect(refused({ ...qwen3, rope_scaling: { rope_type: "yarn", factor: 4, original_max_position_embeddings: 32768, mscale: 1 } })).toThrow(
      /config 'q3\/config.json': rope_scaling.mscale is not supported: DeepSeek's YaRN variant/,
    );
    expect(refused({ ...qwen3, attention_bias: 1 })).toThrow("config 'q3/config.json': attention_bias must be true or false, got 1");
  });

  it("an unknown model_type is refused naming the file and the families read", () => {
    expect(() => modelFamilyOf({ ...qwen3, model_type: "qwen3_moe" }, "moe/config.json")).toThrow(
      `config 'moe/config.json': model_type "qwen3_moe" is not a model family this library reads (llama, mistral, ulysses_gpt, qwen2, qwen3)`,
    );
  });
});
