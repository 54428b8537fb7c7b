/**
 * A float64 reference of Hugging Face's decoder-only models (LlamaForCausalLM,
 * MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM), written out here
 * from their modeling files for the tests of the families, and tiny random
 * model directories under Hugging Face's names and layout for it to read.
 * What it computes:
 *
 * - RMSNorm x / sqrt(mean(x^2) + eps) * w; nn.Linear x W^T (+ b) with
 *   W [out, in]; SwiGLU down(silu(gate(h)) * up(h)).
 * - RoPE with inv_freq_j = theta^(-2j/D) on both halves of each head and
 *   rotate_half(x) = [-x2, x1]. rope_scaling as modeling_rope_utils.py
 *   defines it: linear divides every inv_freq by the factor; llama3 computes
 *   s = (L inv_freq / (2 pi) - low) / (high - low) clamped to [0, 1] (L the
 *   original context) and inv_freq (s + (1 - s) / factor); yarn (as
 *   _compute_yarn_parameters, the factor as written) finds the dimension where
 *   a wavelength fits r times into the original context,
 *   D ln(L / (2 pi r)) / (2 ln theta), floors it for beta_fast and ceils it
 *   for beta_slow (clamped to [0, D - 1]), ramps linearly between them over the
 *   pair index j, mixes inv_freq / factor (weight ramp) with inv_freq
 *   (weight 1 - ramp), and multiplies cos and sin by attention_factor
 *   (default 0.1 ln(factor) + 1).
 * - Grouped-query attention (head h reads kv head floor(h / (H / Hkv))),
 *   causal softmax(q k / sqrt(head_dim)).
 * - head_dim: q is [s, H * head_dim], k and v [s, Hkv * head_dim], o_proj
 *   maps H * head_dim back to hidden. Qwen3's config defaults it to 128, the
 *   others to hidden / heads.
 * - Biases: Qwen2 has them on q_proj, k_proj and v_proj only; Llama's
 *   attention_bias adds them to q, k, v and o, its mlp_bias to gate, up,
 *   down; Qwen3's attention_bias to q, k, v and o.
 * - Qwen3's q_norm and k_norm: RMSNorm over each head's head_dim of q and of
 *   k (weights [head_dim] shared by the heads), after the projections and
 *   before RoPE.
 */
import fs from "node:fs";
import path from "node:path";
import { type Rng, Tensor, bfloat16BitsToFloat32, float32ToBfloat16Bits } from "@ulysses/tensors";
import type { GptConfig } from "../gpt-config.js";
import { gptParamSpecs } from "../gpt-config.js";
import type { ModelFamily } from "../families/family.js";
import { writeSafetensors } from "../safetensors.js";

export type Weight = { shape: number[]; data: Float64Array };
export type HfConfig = Record<string, unknown> & { model_type: string };

/** config.json's rope_scaling as the reference reads it (keys as Hugging Face names them). */
export type HfRopeScaling =
  | { rope_type: "linear"; factor: number }
  | {
      rope_type: "llama3";
      factor: number;
      low_freq_factor: number;
      high_freq_factor: number;
      original_max_position_embeddings: number;
    }
  | { rope_type: "yarn"; factor: number; original_max_position_embeddings: number; beta_fast?: number; beta_slow?: number; attention_factor?: number };

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

/** inv_freq_j of Hugging Face's rotary embedding: theta^(-2j/D), then the scaling (see the top of the file). */
export function inverseFrequency(j: number, dim: number, theta: number, scaling?: HfRopeScaling): number {
  const plain = 1 / theta ** ((2 * j) / dim);
  if (scaling === undefined) return plain;
  if (scaling.rope_type === "linear") return plain / scaling.factor;
  if (scaling.rope_type === "yarn") {
    const findDim = (rotations: number) => (dim * Math.log(scaling.original_max_position_embeddings / (rotations * 2 * Math.PI))) / (2 * Math.log(theta));
    const low = Math.max(Math.floor(findDim(scaling.beta_fast ?? 32)), 0);
    let high = Math.min(Math.ceil(findDim(scaling.beta_slow ?? 1)), dim - 1);
    if (low === high) high += 0.001;
    const extrapolation = 1 - Math.min(1, Math.max(0, (j - low) / (high - low)));
    return (plain / scaling.factor) * (1 - extrapolation) + plain * extrapolation;
  }
  const { factor, low_freq_factor: low, high_freq_factor: high, original_max_position_embeddings: context } = scaling;
  const s = Math.min(1, Math.max(0, ((context * plain) / (2 * Math.PI) - low) / (high - low)));
  return plain * (s + (1 - s) / factor);
}

/** RoPE in place on [seq, heads, D] at positions 0..seq-1. */
function rope(x: Float64Array, seq: number, heads: number, dim: number, theta: number, scaling?: HfRopeScaling): void {
  const half = dim / 2;
  const attention = scaling?.rope_type === "yarn" ? (scaling.attention_factor ?? 0.1 * Math.log(scaling.factor) + 1) : 1;
  for (let p = 0; p < seq; p++)
    for (let h = 0; h < heads; h++) {
      const at = (p * heads + h) * dim;
      const x1 = x.slice(at, at + half);
      const x2 = x.slice(at + half, at + dim);
      for (let j = 0; j < half; j++) {
        const angle = p * inverseFrequency(j, dim, theta, scaling);
        const cos = attention * Math.cos(angle);
        const sin = attention * Math.sin(angle);
        x[at + j] = x1[j]! * cos - x2[j]! * sin;
        x[at + half + j] = x2[j]! * cos + x1[j]! * sin;
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

/**
 * Log-probabilities [seq, vocab] of the Hugging Face model on one sequence; `read` marks every tensor it reads. The mutation
 * "qkNormAfterRope" moves Qwen3's q/k norms after RoPE: a different model, for the tests to tell apart.
 */
export function referenceLogProbs(w: Map<string, Weight>, c: HfConfig, ids: number[], read = new Set<string>(), mutation?: "qkNormAfterRope"): Float64Array {
  const n = (key: string) => c[key] as number;
  const [hidden, heads, kvHeads, vocab, eps, theta] = [
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "rms_norm_eps",
    "rope_theta",
  ].map(n) as [number, number, number, number, number, number];
  const scaling = (c.rope_scaling ?? undefined) as HfRopeScaling | undefined;
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
    rope(q, s, heads, dim, theta, scaling);
    rope(k, s, kvHeads, dim, theta, scaling);
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

/**
 * Random weights for `config` under `family`'s Hugging Face names and shapes: `tensors` to write (float32 or bfloat16) and
 * `weights`, the float64 values the file holds (bfloat16-rounded for bfloat16), for the reference. `scale` is the spread of
 * the "normal" parameters and of the "ones" ones about 1.
 */
export function randomCheckpoint(
  config: GptConfig,
  family: ModelFamily,
  rng: Rng,
  options: { dtype?: "float32" | "bfloat16"; scale?: { normal: number; ones: number } } = {},
): { weights: Map<string, Weight>; tensors: Map<string, Tensor> } {
  const dtype = options.dtype ?? "float32";
  const scale = options.scale ?? { normal: 0.3, ones: 0.2 };
  const weights = new Map<string, Weight>();
  const tensors = new Map<string, Tensor>();
  for (const spec of gptParamSpecs(config)) {
    const t = family.tensorOf(spec.name, config);
    const shape = t.transposed ? [...spec.shape].reverse() : [...spec.shape];
    const values = Float32Array.from(
      { length: shape.reduce((a, b) => a * b, 1) },
      () => (spec.init === "normal" ? scale.normal : scale.ones) * rng.normal() + (spec.init === "ones" ? 1 : 0),
    );
    const bits = Uint16Array.from(values, float32ToBfloat16Bits);
    // the reference reads exactly what the file holds
    weights.set(t.name, { shape, data: dtype === "float32" ? Float64Array.from(values) : Float64Array.from(bits, bfloat16BitsToFloat32) });
    tensors.set(t.name, dtype === "float32" ? new Tensor("float32", shape, values) : new Tensor("bfloat16", shape, bits));
  }
  return { weights, tensors };
}

/** Writes `tensors` as one model.safetensors, or alternately into two shards named by a model.safetensors.index.json. */
export function writeDirectory(dir: string, tensors: Map<string, Tensor>, sharded: boolean): void {
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

/** The worst difference of the model's log-probabilities (from its logits) from the reference's, relative to the reference's range. */
export function relativeError(logits: Float32Array, expected: Float64Array, vocab: number): number {
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
