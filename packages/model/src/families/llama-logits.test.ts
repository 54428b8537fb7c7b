/**
 * A tiny random llama directory (written by the test under Hugging Face's
 * names and layout), imported and run by the model, against a float64
 * reference of Hugging Face's LlamaForCausalLM written out below from its
 * definition: RMSNorm x / sqrt(mean(x^2) + eps) * w; RoPE with
 * inv_freq_j = theta^(-2j/D) on both halves of each head and
 * rotate_half(x) = [-x2, x1]; grouped-query attention (head h reads kv head
 * floor(h / (H / Hkv))), causal softmax(q k / sqrt(D)); SwiGLU
 * down(silu(gate(h)) * up(h)); nn.Linear computes x W^T with W [out, in].
 * RoPE scaling as modeling_rope_utils.py defines it, written out here too:
 * linear divides every inv_freq by the factor; llama3 computes
 * s = (L inv_freq / (2 pi) - low) / (high - low) clamped to [0, 1] (L the
 * original context) and inv_freq (s + (1 - s) / factor). The
 * log-probabilities must agree within 1e-4 (relative to their range).
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import { Rng, Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { gptParamSpecs } from "../gpt-config.js";
import { Gpt } from "../gpt.js";
import { writeSafetensors } from "../safetensors.js";
import { importWeights } from "./import-weights.js";
import { llamaFamily } from "./llama.js";

type Weights = Map<string, { shape: number[]; data: Float64Array }>;

/** y[r, o] = sum_i x[r, i] W[o, i]: nn.Linear with W [out, in]. */
function linear(x: Float64Array, rows: number, w: { shape: number[]; data: Float64Array }): Float64Array {
  const [out, inp] = w.shape as [number, number];
  const y = new Float64Array(rows * out);
  for (let r = 0; r < rows; r++) for (let o = 0; o < out; o++) for (let i = 0; i < inp; i++) y[r * out + o]! += x[r * inp + i]! * w.data[o * inp + i]!;
  return y;
}

function rmsNorm(x: Float64Array, rows: number, w: Float64Array, eps: number): Float64Array {
  const n = w.length;
  const y = new Float64Array(x.length);
  for (let r = 0; r < rows; r++) {
    let squares = 0;
    for (let i = 0; i < n; i++) squares += x[r * n + i]! ** 2;
    const inv = 1 / Math.sqrt(squares / n + eps);
    for (let i = 0; i < n; i++) y[r * n + i] = x[r * n + i]! * inv * w[i]!;
  }
  return y;
}

/** config.json's rope_scaling as the reference reads it (keys as Hugging Face names them). */
type HfRopeScaling =
  | { rope_type: "linear"; factor: number }
  | {
      rope_type: "llama3";
      factor: number;
      low_freq_factor: number;
      high_freq_factor: number;
      original_max_position_embeddings: number;
    };

/** inv_freq_j of Hugging Face's rotary embedding: theta^(-2j/D), then the scaling (see the top of the file). */
function inverseFrequency(j: number, dim: number, theta: number, scaling?: HfRopeScaling): number {
  const plain = 1 / theta ** ((2 * j) / dim);
  if (scaling === undefined) return plain;
  if (scaling.rope_type === "linear") return plain / scaling.factor;
  const { factor, low_freq_factor: low, high_freq_factor: high, original_max_position_embeddings: context } = scaling;
  const s = Math.min(1, Math.max(0, ((context * plain) / (2 * Math.PI) - low) / (high - low)));
  return plain * (s + (1 - s) / factor);
}

/** RoPE in place on [seq, heads, D] at positions 0..seq-1. */
function rope(x: Float64Array, seq: number, heads: number, dim: number, theta: number, scaling?: HfRopeScaling): void {
  const half = dim / 2;
  for (let p = 0; p < seq; p++)
    for (let h = 0; h < heads; h++) {
      const at = (p * heads + h) * dim;
      const x1 = x.slice(at, at + half);
      const x2 = x.slice(at + half, at + dim);
      for (let j = 0; j < half; j++) {
        const angle = p * inverseFrequency(j, dim, theta, scaling);
        x[at + j] = x1[j]! * Math.cos(angle) - x2[j]! * Math.sin(angle);
        x[at + half + j] = x2[j]! * Math.cos(angle) + x1[j]! * Math.sin(angle);
      }
    }
}

/** Log-probabilities [seq, vocab] of Hugging Face's LlamaForCausalLM on one sequence. */
function referenceLogProbs(w: Weights, c: Record<string, number>, ids: number[], scaling?: HfRopeScaling): Float64Array {
  const { hidden_size: hidden, num_attention_heads: heads, num_key_value_heads: kvHeads, num_hidden_layers: layers, vocab_size: vocab } = c;
  const dim = hidden! / heads!;
  const s = ids.length;
  const embed = w.get("model.embed_tokens.weight")!;
  let x = new Float64Array(s * hidden!);
  ids.forEach((id, p) => x.set(embed.data.subarray(id * hidden!, (id + 1) * hidden!), p * hidden!));
  for (let l = 0; l < layers!; l++) {
    const g = (name: string) => w.get(`model.layers.${l}.${name}`)!;
    const h = rmsNorm(x, s, g("input_layernorm.weight").data, c.rms_norm_eps!);
    const q = linear(h, s, g("self_attn.q_proj.weight"));
    const k = linear(h, s, g("self_attn.k_proj.weight"));
    const v = linear(h, s, g("self_attn.v_proj.weight"));
    rope(q, s, heads!, dim, c.rope_theta!, scaling);
    rope(k, s, kvHeads!, dim, c.rope_theta!, scaling);
    const attn = new Float64Array(s * heads! * dim);
    for (let hd = 0; hd < heads!; hd++) {
      const kv = Math.floor(hd / (heads! / kvHeads!));
      for (let i = 0; i < s; i++) {
        const scores = Array.from({ length: i + 1 }, (_, j) => {
          let dot = 0;
          for (let d = 0; d < dim; d++) dot += q[(i * heads! + hd) * dim + d]! * k[(j * kvHeads! + kv) * dim + d]!;
          return dot / Math.sqrt(dim);
        });
        const top = Math.max(...scores);
        const e = scores.map((v) => Math.exp(v - top));
        const total = e.reduce((a, b) => a + b, 0);
        for (let j = 0; j <= i; j++) for (let d = 0; d < dim; d++) attn[(i * heads! + hd) * dim + d]! += (e[j]! / total) * v[(j * kvHeads! + kv) * dim + d]!;
      }
    }
    const o = linear(attn, s, g("self_attn.o_proj.weight"));
    x = x.map((value, i) => value + o[i]!);
    const h2 = rmsNorm(x, s, g("post_attention_layernorm.weight").data, c.rms_norm_eps!);
    const gate = linear(h2, s, g("mlp.gate_proj.weight"));
    const up = linear(h2, s, g("mlp.up_proj.weight"));
    const act = gate.map((a, i) => (a / (1 + Math.exp(-a))) * up[i]!);
    const m = linear(act, s, g("mlp.down_proj.weight"));
    x = x.map((value, i) => value + m[i]!);
  }
  const logits = linear(rmsNorm(x, s, w.get("model.norm.weight")!.data, c.rms_norm_eps!), s, w.get("lm_head.weight") ?? embed);
  for (let p = 0; p < s; p++) {
    const row = logits.subarray(p * vocab!, (p + 1) * vocab!);
    const top = Math.max(...row);
    const lse = top + Math.log(row.reduce((a, b) => a + Math.exp(b - top), 0));
    for (let t = 0; t < vocab!; t++) row[t]! -= lse;
  }
  return logits;
}

/**
 * Writes a random llama directory of `hfConfig`, imports it, and returns the worst difference of the model's log-probabilities
 * on `length` random tokens from the reference's, relative to their range.
 */
async function worstDifference(hfConfig: Record<string, unknown>, length: number): Promise<number> {
  const config = llamaFamily.configFrom(hfConfig, "config.json");
  const vocab = hfConfig.vocab_size as number;
  const rng = new Rng(7);
  const weights: Weights = new Map();
  const tensors = new Map<string, Tensor>();
  for (const spec of gptParamSpecs(config)) {
    const t = llamaFamily.tensorOf(spec.name, config);
    const shape = t.transposed ? [...spec.shape].reverse() : [...spec.shape];
    const values = Float32Array.from(
      { length: shape.reduce((a, b) => a * b, 1) },
      () => (spec.init === "normal" ? 0.3 : 1) * rng.normal() + (spec.init === "ones" ? 1 : 0),
    );
    weights.set(t.name, { shape, data: Float64Array.from(values) });
    tensors.set(t.name, new Tensor("float32", shape, values));
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "llama-logits-"));
  try {
    writeSafetensors(path.join(dir, "model.safetensors"), tensors);
    const model = new Gpt(config, { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), seed: 1 });
    importWeights(dir, config, llamaFamily, model.params);
    const ids = Array.from({ length }, () => rng.int(vocab));
    const logits = (await model.forward(Tensor.from("int32", [1, ids.length], ids))).logits.data as Float32Array;
    const scaling = (hfConfig.rope_scaling ?? undefined) as HfRopeScaling | undefined;
    const expected = referenceLogProbs(weights, hfConfig as unknown as Record<string, number>, ids, scaling);
    let worst = 0;
    let range = 0;
    for (let p = 0; p < ids.length; p++) {
      const row = logits.subarray(p * vocab, (p + 1) * vocab);
      const top = Math.max(...row);
      const lse = top + Math.log(row.reduce((a, b) => a + Math.exp(b - top), 0));
      for (let t = 0; t < vocab; t++) {
        worst = Math.max(worst, Math.abs(row[t]! - lse - expected[p * vocab + t]!));
        range = Math.max(range, Math.abs(expected[p * vocab + t]!));
      }
    }
    return worst / range;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const tiny = {
  model_type: "llama",
  hidden_size: 16,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  intermediate_size: 40,
  num_hidden_layers: 2,
  vocab_size: 24,
  max_position_embeddings: 64,
  rms_norm_eps: 1e-6,
  rope_theta: 500000,
};

/**
 * Head dim 8 and theta 10000: inv_freq 1, 0.1, 0.01, 0.001, wavelengths 6.3, 63, 628, 6283. With a context of 256, factors
 * low 1 and high 8 (wavelength bands 256 and 32), pair 0 is kept, pair 1 interpolated (s = 0.44) and pairs 2 and 3 divided.
 */
const scaled = {
  ...tiny,
  hidden_size: 32,
  intermediate_size: 56,
  rope_theta: 10000,
  rope_scaling: { rope_type: "llama3", factor: 4, low_freq_factor: 1, high_freq_factor: 8, original_max_position_embeddings: 256 },
};

describe("a llama directory against Hugging Face's LlamaForCausalLM (float64 reference)", () => {
  for (const tied of [false, true]) {
    it(`GQA, RoPE theta 500000, intermediate not a multiple of hidden, ${tied ? "tied" : "untied"} head: log-probabilities within 1e-4`, async () => {
      expect(await worstDifference({ ...tiny, tie_word_embeddings: tied }, 11)).toBeLessThan(1e-4);
    });
  }

  it("RoPE scaling llama3 (head dim 8: one pair kept, one interpolated, two divided): log-probabilities within 1e-4", async () => {
    const inverse = [0, 1, 2, 3].map((j) => inverseFrequency(j, 8, 10000, scaled.rope_scaling as HfRopeScaling) / 10000 ** (-j / 4));
    expect(inverse[0]).toBe(1);
    expect(inverse[1]).toBeGreaterThan(0.3);
    expect(inverse[1]).toBeLessThan(0.9);
    expect(inverse.slice(2)).toEqual([0.25, 0.25]);
    expect(await worstDifference(scaled, 40)).toBeLessThan(1e-4);
  });

  it("RoPE scaling linear (factor 2.5): log-probabilities within 1e-4", async () => {
    expect(await worstDifference({ ...scaled, rope_scaling: { rope_type: "linear", factor: 2.5 } }, 40)).toBeLessThan(1e-4);
  });
});
