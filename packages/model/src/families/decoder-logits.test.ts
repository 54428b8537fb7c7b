/**
 * Tiny random qwen2, qwen3, mistral and llama directories (written by the
 * test under Hugging Face's names and layout: float32 or bfloat16, one
 * model.safetensors or two shards with a model.safetensors.index.json),
 * imported and run by the model, against a float64 reference of Hugging
 * Face's Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM and
 * LlamaForCausalLM written out below from their definitions (the sibling of
 * llama-logits.test.ts, with what these add):
 *
 * - head_dim: q is [s, H * head_dim], k and v [s, Hkv * head_dim], o_proj
 *   maps H * head_dim back to hidden; scores are scaled by 1 / sqrt(head_dim).
 *   Qwen3's config defaults it to 128, the others to hidden / heads.
 * - biases: Qwen2 has them on q_proj, k_proj and v_proj only; Llama's
 *   attention_bias adds them to q, k, v and o, its mlp_bias to gate, up,
 *   down; Qwen3's attention_bias to q, k, v and o. nn.Linear: x W^T + b.
 * - Qwen3's q_norm and k_norm: RMSNorm over each head's head_dim of q and of
 *   k (weights [head_dim] shared by the heads, rms_norm_eps), after the
 *   projections and before RoPE.
 *
 * The bfloat16 directories' reference reads the same bfloat16-rounded values.
 * The log-probabilities must agree within 1e-4 (relative to their range);
 * the reference with the q/k norms moved after RoPE must not.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import { Rng, Tensor, bfloat16BitsToFloat32, float32ToBfloat16Bits } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { gptParamSpecs } from "../gpt-config.js";
import { Gpt } from "../gpt.js";
import { writeSafetensors } from "../safetensors.js";
import { modelFamilyOf } from "./family.js";
import { importWeights } from "./import-weights.js";

type Weight = { shape: number[]; data: Float64Array };
type HfConfig = Record<string, unknown> & { model_type: string };

/** y[r, o] = sum_i x[r, i] W[o, i] (+ b[o]): nn.Linear with W [out, in]. */
function linear(x: Float64Array, rows: number, w: Weight, b?: Weight): Float64Array {
  const [out, inp] = w.shape as [number, number];
  const y = new Float64Array(rows * out);
  for (let r = 0; r < rows; r++)
    for (let o = 0; o < out; o++) {
      let sum = b === undefined ? 0 : b.data[o]!;
      for (let i = 0; i < inp; i++) sum += x[r * inp + i]! * w.data[o * inp + i]!;
      y[r * out + o] = sum;
    }
  return y;
}

/** RMSNorm over the last axis of width w.length: x / sqrt(mean(x^2) + eps) * w. */
function rmsNorm(x: Float64Array, w: Float64Array, eps: number): Float64Array {
  const n = w.length;
  const y = new Float64Array(x.length);
  for (let r = 0; r < x.length / n; r++) {
    let squares = 0;
    for (let i = 0; i < n; i++) squares += x[r * n + i]! ** 2;
    const inv = 1 / Math.sqrt(squares / n + eps);
    for (let i = 0; i < n; i++) y[r * n + i] = x[r * n + i]! * inv * w[i]!;
  }
  return y;
}

/** RoPE in place on [seq, heads, D] at positions 0..seq-1: rotate_half, inv_freq_j = theta^(-2j/D). */
function rope(x: Float64Array, seq: number, heads: number, dim: number, theta: number): void {
  const half = dim / 2;
  for (let p = 0; p < seq; p++)
    for (let h = 0; h < heads; h++) {
      const at = (p * heads + h) * dim;
      const x1 = x.slice(at, at + half);
      const x2 = x.slice(at + half, at + dim);
      for (let j = 0; j < half; j++) {
        const angle = p * theta ** ((-2 * j) / dim);
        x[at + j] = x1[j]! * Math.cos(angle) - x2[j]! * Math.sin(angle);
        x[at + half + j] = x2[j]! * Math.cos(angle) + x1[j]! * Math.sin(angle);
      }
    }
}

/** The reference's reading of the config: which tensors each family's layers have, from Hugging Face's modeling files. */
function architecture(c: HfConfig) {
  const n = (key: string) => c[key] as number;
  const type = c.model_type;
  const headDim = (c.head_dim as number | undefined) ?? (type === "qwen3" ? 128 : n("hidden_size") / n("num_attention_heads"));
  const attentionBias = c.attention_bias === true && type !== "mistral";
  return {
    headDim,
    qkvBias: type === "qwen2" || attentionBias,
    oBias: attentionBias,
    mlpBias: type === "llama" && c.mlp_bias === true,
    qkNorm: type === "qwen3",
  };
}

/** Log-probabilities [seq, vocab] of the Hugging Face model on one sequence; `read` marks every tensor it reads. */
function referenceLogProbs(w: Map<string, Weight>, c: HfConfig, ids: number[], read: Set<string>, mutation?: "qkNormAfterRope"): Float64Array {
  const n = (key: string) => c[key] as number;
  const [hidden, heads, kvHeads, vocab, eps, theta] = [
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "rms_norm_eps",
    "rope_theta",
  ].map(n) as [number, number, number, number, number, number];
  const a = architecture(c);
  const dim = a.headDim;
  const get = (name: string): Weight => {
    const t = w.get(name);
    if (t === undefined) throw new Error(`the checkpoint has no '${name}'`);
    read.add(name);
    return t;
  };
  const s = ids.length;
  const embed = get("model.embed_tokens.weight");
  let x = new Float64Array(s * hidden);
  ids.forEach((id, p) => x.set(embed.data.subarray(id * hidden, (id + 1) * hidden), p * hidden));
  for (let l = 0; l < n("num_hidden_layers"); l++) {
    const g = (name: string) => get(`model.layers.${l}.${name}`);
    const proj = (input: Float64Array, name: string, bias: boolean) => linear(input, s, g(`${name}.weight`), bias ? g(`${name}.bias`) : undefined);
    const h = rmsNorm(x, g("input_layernorm.weight").data, eps);
    let q = proj(h, "self_attn.q_proj", a.qkvBias);
    let k = proj(h, "self_attn.k_proj", a.qkvBias);
    const v = proj(h, "self_attn.v_proj", a.qkvBias);
    // [s, n * D] viewed as [s * n, D]: each head normalised (Qwen3), before RoPE (or, mutated, after)
    const normed = () => {
      q = rmsNorm(q, g("self_attn.q_norm.weight").data, eps);
      k = rmsNorm(k, g("self_attn.k_norm.weight").data, eps);
    };
    if (a.qkNorm && mutation !== "qkNormAfterRope") normed();
    rope(q, s, heads, dim, theta);
    rope(k, s, kvHeads, dim, theta);
    if (a.qkNorm && mutation === "qkNormAfterRope") normed();
    const attn = new Float64Array(s * heads * dim);
    for (let hd = 0; hd < heads; hd++) {
      const kv = Math.floor(hd / (heads / kvHeads));
      for (let i = 0; i < s; i++) {
        const scores = Array.from({ length: i + 1 }, (_, j) => {
          let dot = 0;
          for (let d = 0; d < dim; d++) dot += q[(i * heads + hd) * dim + d]! * k[(j * kvHeads + kv) * dim + d]!;
          return dot / Math.sqrt(dim);
        });
        const top = Math.max(...scores);
        const e = scores.map((value) => Math.exp(value - top));
        const total = e.reduce((p, r) => p + r, 0);
        for (let j = 0; j <= i; j++) for (let d = 0; d < dim; d++) attn[(i * heads + hd) * dim + d]! += (e[j]! / total) * v[(j * kvHeads + kv) * dim + d]!;
      }
    }
    const o = proj(attn, "self_attn.o_proj", a.oBias);
    x = x.map((value, i) => value + o[i]!);
    const h2 = rmsNorm(x, g("post_attention_layernorm.weight").data, eps);
    const gate = proj(h2, "mlp.gate_proj", a.mlpBias);
    const up = proj(h2, "mlp.up_proj", a.mlpBias);
    const m = proj(
      gate.map((value, i) => (value / (1 + Math.exp(-value))) * up[i]!),
      "mlp.down_proj",
      a.mlpBias,
    );
    x = x.map((value, i) => value + m[i]!);
  }
  const head = c.tie_word_embeddings === true ? embed : get("lm_head.weight");
  const logits = linear(rmsNorm(x, get("model.norm.weight").data, eps), s, head);
  for (let p = 0; p < s; p++) {
    const row = logits.subarray(p * vocab, (p + 1) * vocab);
    const top = Math.max(...row);
    const lse = top + Math.log(row.reduce((sum, value) => sum + Math.exp(value - top), 0));
    for (let t = 0; t < vocab; t++) row[t]! -= lse;
  }
  return logits;
}

/** Writes `tensors` as one model.safetensors, or alternately into two shards named by a model.safetensors.index.json. */
function writeDirectory(dir: string, tensors: Map<string, Tensor>, sharded: boolean): void {
  if (!sharded) {
    writeSafetensors(path.join(dir, "model.safetensors"), tensors);
    return;
  }
  const shards = [new Map<string, Tensor>(), new Map<string, Tensor>()];
  const weightMap: Record<string, string> = {};
  [...tensors].forEach(([name, t], i) => {
    shards[i % 2]!.set(name, t);
    weightMap[name] = `model-0000${(i % 2) + 1}-of-00002.safetensors`;
  });
  shards.forEach((shard, i) => writeSafetensors(path.join(dir, `model-0000${i + 1}-of-00002.safetensors`), shard));
  fs.writeFileSync(path.join(dir, "model.safetensors.index.json"), JSON.stringify({ metadata: {}, weight_map: weightMap }));
}

/** The worst log-probability difference relative to the reference's range. */
function relativeError(logits: Float32Array, expected: Float64Array, vocab: number): number {
  let worst = 0;
  let range = 0;
  for (let p = 0; p < expected.length / vocab; p++) {
    const row = logits.subarray(p * vocab, (p + 1) * vocab);
    const top = Math.max(...row);
    const lse = top + Math.log(row.reduce((a, b) => a + Math.exp(b - top), 0));
    for (let t = 0; t < vocab; t++) {
      worst = Math.max(worst, Math.abs(row[t]! - lse - expected[p * vocab + t]!));
      range = Math.max(range, Math.abs(expected[p * vocab + t]!));
    }
  }
  return worst / range;
}

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
      const weights = new Map<string, Weight>();
      const tensors = new Map<string, Tensor>();
      for (const spec of gptParamSpecs(config)) {
        const t = family.tensorOf(spec.name, config);
        const shape = t.transposed ? [...spec.shape].reverse() : [...spec.shape];
        const values = Float32Array.from(
          { length: shape.reduce((a, b) => a * b, 1) },
          () => (spec.init === "normal" ? 0.3 : 0.2) * rng.normal() + (spec.init === "ones" ? 1 : 0),
        );
        const bits = Uint16Array.from(values, float32ToBfloat16Bits);
        // the reference reads exactly what the file holds
        weights.set(t.name, { shape, data: dtype === "float32" ? Float64Array.from(values) : Float64Array.from(bits, bfloat16BitsToFloat32) });
        tensors.set(t.name, dtype === "float32" ? new Tensor("float32", shape, values) : new Tensor("bfloat16", shape, bits));
      }
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
