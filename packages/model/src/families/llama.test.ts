/**
 * The llama family against real config.json files (SmolLM2-135M's, Llama
 * 3.2-1B's and Mistral-7B-v0.1's fields, as their Hugging Face repositories
 * publish them) and Hugging Face's tensor names for LlamaForCausalLM. The
 * parameter count is SmolLM2-135M's published one, 134,515,008.
 */
import { describe, expect, it } from "vitest";
import { blockConfigOf, gptParamSpecs, parameterCount, validateGptConfig, type GptConfig } from "../gpt-config.js";
import { modelFamilyOf } from "./family.js";
import { llamaFamily } from "./llama.js";

const smollm2 = {
  architectures: ["LlamaForCausalLM"],
  attention_bias: false,
  attention_dropout: 0.0,
  bos_token_id: 0,
  eos_token_id: 0,
  hidden_act: "silu",
  hidden_size: 576,
  initializer_range: 0.041666666666666664,
  intermediate_size: 1536,
  max_position_embeddings: 8192,
  mlp_bias: false,
  model_type: "llama",
  num_attention_heads: 9,
  num_hidden_layers: 30,
  num_key_value_heads: 3,
  pretraining_tp: 1,
  rms_norm_eps: 1e-5,
  rope_scaling: null,
  rope_theta: 100000,
  tie_word_embeddings: true,
  torch_dtype: "bfloat16",
  vocab_size: 49152,
};

const llama32 = {
  ...smollm2,
  hidden_size: 2048,
  intermediate_size: 8192,
  num_attention_heads: 32,
  num_key_value_heads: 8,
  num_hidden_layers: 16,
  head_dim: 64,
  max_position_embeddings: 131072,
  rope_theta: 500000,
  vocab_size: 128256,
  rope_scaling: { factor: 32.0, high_freq_factor: 4.0, low_freq_factor: 1.0, original_max_position_embeddings: 8192, rope_type: "llama3" },
};

const mistral = {
  architectures: ["MistralForCausalLM"],
  hidden_act: "silu",
  hidden_size: 4096,
  intermediate_size: 14336,
  max_position_embeddings: 32768,
  model_type: "mistral",
  num_attention_heads: 32,
  num_hidden_layers: 32,
  num_key_value_heads: 8,
  rms_norm_eps: 1e-5,
  rope_theta: 10000.0,
  sliding_window: 4096,
  tie_word_embeddings: false,
  vocab_size: 32000,
};

describe("the llama family", () => {
  it("reads SmolLM2-135M's config.json into the model it describes (134,515,008 parameters)", () => {
    const family = modelFamilyOf(smollm2, "smollm2/config.json");
    expect(family.name).toBe("llama");
    const config = family.configFrom(smollm2, "smollm2/config.json");
    expect(config).toEqual({
      vocab: 49152,
      hidden: 576,
      heads: 9,
      kvHeads: 3,
      layers: 30,
      mlp: "swiglu",
      mlpRatio: 1536 / 576,
      mlpHidden: 1536,
      maxSeq: 8192,
      tiedHead: true,
      norm: "rmsnorm",
      eps: 1e-5,
      ropeBase: 100000,
    } satisfies GptConfig);
    validateGptConfig(config);
    expect(blockConfigOf(config).mlpHidden).toBe(1536);
    expect(blockConfigOf(config).headDim).toBe(64);
    expect(parameterCount(config)).toBe(134_515_008);
  });

  it("reads Llama 3.2's llama3 RoPE scaling (rope-scaling.test.ts has the rest)", () => {
    expect(llamaFamily.configFrom(llama32, "llama/config.json").ropeScaling).toEqual({
      type: "llama3",
      factor: 32,
      lowFreqFactor: 1,
      highFreqFactor: 4,
      originalMaxPositions: 8192,
    });
  });

  it("refuses by name what it cannot run yet: other RoPE scalings, a binding sliding window, Mistral biases, another activation, dropout", () => {
    expect(() => llamaFamily.configFrom({ ...llama32, rope_scaling: { rope_type: "dynamic", factor: 4 } }, "llama/config.json")).toThrow(
      /^config 'llama\/config.json': rope_scaling.rope_type "dynamic" is not supported/,
    );
    expect(() => llamaFamily.configFrom(mistral, "mistral/config.json")).toThrow(
      "config 'mistral/config.json': sliding_window 4096 is not supported: sliding-window attention shorter than max_position_embeddings (32768) is not implemented yet",
    );
    const { sliding_window: _, ...noWindow } = mistral;
    expect(() => llamaFamily.configFrom(noWindow, "m.json")).toThrow(/sliding_window 4096 is not supported/); // Mistral's default window
    expect(llamaFamily.configFrom({ ...mistral, sliding_window: null }, "m.json").kvHeads).toBe(8);
    expect(llamaFamily.configFrom({ ...mistral, sliding_window: 32768 }, "m.json").maxSeq).toBe(32768);
    expect(() => llamaFamily.configFrom({ ...mistral, sliding_window: null, attention_bias: true }, "m.json")).toThrow(
      "config 'm.json': attention_bias true is not supported: Hugging Face's Mistral has no biases",
    );
    expect(() => llamaFamily.configFrom({ ...mistral, sliding_window: null, mlp_bias: true }, "m.json")).toThrow(
      "config 'm.json': mlp_bias true is not supported",
    );
    expect(() => llamaFamily.configFrom({ ...smollm2, head_dim: 7 }, "c.json")).toThrow(
      "config 'c.json': head_dim 7 is not supported: RoPE needs an even head width",
    );
    expect(() => llamaFamily.configFrom({ ...smollm2, attention_bias: "yes" }, "c.json")).toThrow(
      "config 'c.json': attention_bias must be true or false, got \"yes\"",
    );
    expect(() => llamaFamily.configFrom({ ...smollm2, attention_dropout: 0.1 }, "c.json")).toThrow("config 'c.json': attention_dropout 0.1 is not supported");
    expect(() => llamaFamily.configFrom({ ...smollm2, hidden_act: "gelu" }, "c.json")).toThrow("config 'c.json': hidden_act \"gelu\" is not supported");
    expect(() => llamaFamily.configFrom({ ...smollm2, num_hidden_layers: "30" }, "c.json")).toThrow(
      "config 'c.json': num_hidden_layers must be a positive integer, got \"30\"",
    );
    expect(() => modelFamilyOf({ model_type: "gpt2" }, "g/config.json")).toThrow(
      `config 'g/config.json': model_type "gpt2" is not a model family this library reads (llama, mistral, ulysses_gpt, qwen2, qwen3)`,
    );
  });

  it("reads attention_bias (q, k, v and o), mlp_bias (gate, up, down) and a head_dim other than hidden / heads", () => {
    const config = llamaFamily.configFrom({ ...smollm2, attention_bias: true, mlp_bias: true, head_dim: 128 }, "c.json");
    expect([config.attentionBias, config.mlpBias, config.headDim]).toEqual(["qkvo", true, 128]);
    expect(llamaFamily.configFrom({ ...smollm2, head_dim: 64 }, "c.json").headDim).toBeUndefined(); // hidden / heads: the default
    const biases = gptParamSpecs({ ...config, layers: 1 })
      .filter((s) => s.name.endsWith(".b"))
      .map((s) => `${llamaFamily.tensorOf(s.name, config).name} [${s.shape.join(", ")}]`);
    expect(biases).toEqual([
      "model.layers.0.self_attn.q_proj.bias [1152]",
      "model.layers.0.self_attn.k_proj.bias [384]",
      "model.layers.0.self_attn.v_proj.bias [384]",
      "model.layers.0.self_attn.o_proj.bias [576]",
      "model.layers.0.mlp.gate_proj.bias [1536]",
      "model.layers.0.mlp.up_proj.bias [1536]",
      "model.layers.0.mlp.down_proj.bias [576]",
    ]);
  });

  it("names every parameter's Hugging Face tensor, the matrices stored [out, in]", () => {
    const config = llamaFamily.configFrom({ ...smollm2, num_hidden_layers: 1, tie_word_embeddings: false }, "c.json");
    const tensors = gptParamSpecs(config).map((spec) => {
      const t = llamaFamily.tensorOf(spec.name, config);
      return `${t.name}${t.transposed ? " (transposed)" : ""}`;
    });
    expect(tensors).toEqual([
      "model.embed_tokens.weight",
      "model.layers.0.input_layernorm.weight",
      "model.layers.0.self_attn.q_proj.weight (transposed)",
      "model.layers.0.self_attn.k_proj.weight (transposed)",
      "model.layers.0.self_attn.v_proj.weight (transposed)",
      "model.layers.0.self_attn.o_proj.weight (transposed)",
      "model.layers.0.post_attention_layernorm.weight",
      "model.layers.0.mlp.gate_proj.weight (transposed)",
      "model.layers.0.mlp.up_proj.weight (transposed)",
      "model.layers.0.mlp.down_proj.weight (transposed)",
      "model.norm.weight",
      "lm_head.weight (transposed)",
    ]);
  });
});
