/**
 * Tiny random qwen2, qwen3, mistral and llama directories (written by the
 * test under Hugging Face's names and layout: float32 or bfloat16, one
 * model.safetensors or two shards with a model.safetensors.index.json),
 * imported and run by the model, against the float64 reference of Hugging
 * Face's Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM and
 * LlamaForCausalLM in testing-fixtures/hf-reference.ts (head_dim, each
 * family's biases, Qwen3's q/k norms before RoPE). The bfloat16 directories'
 * reference reads the same bfloat16-rounded values. The log-probabilities
 * must agree within 1e-4 (relative to their range); the reference with the
 * q/k norms moved after RoPE must not.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import { Rng, Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { Gpt } from "../gpt.js";
import { type HfConfig, randomCheckpoint, referenceLogProbs, relativeError, writeDirectory } from "../testing-fixtures/hf-reference.js";
import { modelFamilyOf } from "./family.js";
import { importWeights } from "./import-weights.js";

const common = {
  hidden_size: 16,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  intermediate_size: 40,
  num_hidden_layers: 2,
  vocab_size: 24,
  max_position_embeddings: 64,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000,
  hidden_act: "silu",
};

const cases: { name: string; config: HfConfig; dtype: "float32" | "bfloat16"; sharded: boolean }[] = [
  {
    name: "qwen2 (q, k, v biases), GQA, tied",
    config: { ...common, model_type: "qwen2", tie_word_embeddings: true, use_sliding_window: false },
    dtype: "float32",
    sharded: false,
  },
  { name: "qwen2 (q, k, v biases), GQA, untied", config: { ...common, model_type: "qwen2", tie_word_embeddings: false }, dtype: "bfloat16", sharded: true },
  {
    name: "qwen3 (q/k norms), head_dim 6 on hidden 16 with 4 heads, GQA, untied",
    config: { ...common, model_type: "qwen3", head_dim: 6, tie_word_embeddings: false, attention_bias: false },
    dtype: "float32",
    sharded: true,
  },
  {
    name: "qwen3 (q/k norms, attention_bias), head_dim 10, 4 kv heads of 4, tied",
    config: { ...common, model_type: "qwen3", head_dim: 10, num_key_value_heads: 4, tie_word_embeddings: true, attention_bias: true },
    dtype: "bfloat16",
    sharded: false,
  },
  {
    name: "qwen3 with YaRN (factor 4 over an original context of 32), head_dim 8, tied",
    config: {
      ...common,
      model_type: "qwen3",
      head_dim: 8,
      tie_word_embeddings: true,
      rope_scaling: { rope_type: "yarn", factor: 4, original_max_position_embeddings: 32 },
    },
    dtype: "bfloat16",
    sharded: true,
  },
  {
    name: "mistral, GQA, head_dim 8, untied",
    config: { ...common, model_type: "mistral", sliding_window: null, head_dim: 8 },
    dtype: "bfloat16",
    sharded: true,
  },
  { name: "mistral, GQA, tied", config: { ...common, model_type: "mistral", sliding_window: 64, tie_word_embeddings: true }, dtype: "float32", sharded: false },
  {
    name: "llama with attention_bias, mlp_bias and head_dim 6, untied",
    config: { ...common, model_type: "llama", attention_bias: true, mlp_bias: true, head_dim: 6 },
    dtype: "bfloat16",
    sharded: true,
  },
];

describe("qwen2, qwen3, mistral and llama directories against Hugging Face's models (float64 reference)", () => {
  for (const { name, config: hf, dtype, sharded } of cases) {
    it(`${name}, ${dtype}, ${sharded ? "two shards" : "one file"}: log-probabilities within 1e-4`, async () => {
      const family = modelFamilyOf(hf, "config.json");
      const config = family.configFrom(hf, "config.json");
      const rng = new Rng(7);
      const { weights, tensors } = randomCheckpoint(config, family, rng, { dtype });
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), `${hf.model_type}-logits-`));
      writeDirectory(dir, tensors, sharded);
      const model = new Gpt(config, { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), seed: 1 });
      importWeights(dir, config, family, model.params);
      const ids = Array.from({ length: 11 }, () => rng.int(24));
      const logits = (await model.forward(Tensor.from("int32", [1, ids.length], ids))).logits.data as Float32Array;
      const read = new Set<string>();
      expect(relativeError(logits, referenceLogProbs(weights, hf, ids, read), 24)).toBeLessThan(1e-4);
      // the reference read every tensor the directory holds (none is there that Hugging Face's model would not use)
      expect([...weights.keys()].filter((k) => !read.has(k))).toEqual([]);
      if (hf.model_type === "qwen3") {
        // the q/k norms after RoPE instead of before: a different model, which the test tells apart
        expect(relativeError(logits, referenceLogProbs(weights, hf, ids, new Set(), "qkNormAfterRope"), 24)).toBeGreaterThan(1e-3);
      }
      fs.rmSync(dir, { recursive: true, force: true });
    });
  }
});
