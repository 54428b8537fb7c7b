/**
 * A tiny random llama directory (written by the test under Hugging Face's
 * names and layout), imported and run by the model, against a float64
 * reference of Hugging Face's LlamaForCausalLM written out below from its
 * definition: RMSNorm x / sqrt(mean(x^2) + eps) * w; RoPE with
 * inv_freq_j = theta^(-2j/D) on both halves of each head and
 * rotate_half(x) = [-x2, x1]; grouped-query attention (head h reads kv head
 * floor(h / (H / Hkv))), causal softmax(q k / sqrt(D)); SwiGLU
 * down(silu(gate(h)) * up(h)); nn.Linear computes x W^T with W [out, in].
 * The log-probabilities must agree within 1e-4 (relative to their range).
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

/** RoPE in place on [seq, heads, D] at positions 0..seq-1. */
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

/** Log-probabilities [seq, vocab] of Hugging Face's LlamaForCausalLM on one sequence. */
function referenceLogProbs(w: Weights, c: Record<string, number>, ids: number[]): Float64Array {
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
    rope(q, s, heads!, dim, c.rope_theta!);
    rope(k, s, kvHeads!, dim, c.rope_theta!);
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

describe("a llama directory against Hugging Face's LlamaForCausalLM (float64 reference)", () => {
  for (const tied of [false, true]) {
    it(`GQA, RoPE theta 500000, intermediate not a multiple of hidden, ${tied ? "tied" : "untied"} head: log-probabilities within 1e-4`, async () => {
      const hfConfig = {
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
        tie_word_embeddings: tied,
      };
      const config = llamaFamily.configFrom(hfConfig, "config.json");
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
      writeSafetensors(path.join(dir, "model.safetensors"), tensors);
      const model = new Gpt(config, { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), seed: 1 });
      importWeights(dir, config, llamaFamily, model.params);
      const ids = Array.from({ length: 11 }, () => rng.int(24));
      const logits = (await model.forward(Tensor.from("int32", [1, ids.length], ids))).logits.data as Float32Array;
      const expected = referenceLogProbs(weights, hfConfig as unknown as Record<string, number>, ids);
      let worst = 0;
      let range = 0;
      for (let p = 0; p < ids.length; p++) {
        const row = logits.subarray(p * 24, (p + 1) * 24);
        const top = Math.max(...row);
        const lse = top + Math.log(row.reduce((a, b) => a + Math.exp(b - top), 0));
        for (let t = 0; t < 24; t++) {
          worst = Math.max(worst, Math.abs(row[t]! - lse - expected[p * 24 + t]!));
          range = Math.max(range, Math.abs(expected[p * 24 + t]!));
        }
      }
      expect(worst / range).toBeLessThan(1e-4);
      fs.rmSync(dir, { recursive: true, force: true });
    });
  }
});
