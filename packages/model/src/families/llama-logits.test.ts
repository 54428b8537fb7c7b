/**
 * A tiny random llama directory (written by the test under Hugging Face's
 * names and layout), imported and run by the model, against the float64
 * reference of Hugging Face's LlamaForCausalLM in
 * testing-fixtures/hf-reference.ts (written out there from its definition,
 * RoPE scaling included: linear, llama3 and yarn as modeling_rope_utils.py
 * defines them). The log-probabilities must agree within 1e-4 (relative to
 * their range); yarn's without its attention factor must not.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import { Rng, Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { Gpt } from "../gpt.js";
import {
  type HfConfig,
  type HfRopeScaling,
  inverseFrequency,
  randomCheckpoint,
  referenceLogProbs,
  relativeError,
  writeDirectory,
} from "../testing-fixtures/hf-reference.js";
import { importWeights } from "./import-weights.js";
import { llamaFamily } from "./llama.js";

/**
 * Writes a random llama directory of `hfConfig`, imports it, and returns the worst difference of the model's log-probabilities
 * on `length` random tokens from the reference's, relative to their range; the reference reads `referenceConfig` (default: the
 * same).
 */
async function worstDifference(hfConfig: HfConfig, length: number, referenceConfig = hfConfig): Promise<number> {
  const config = llamaFamily.configFrom(hfConfig, "config.json");
  const vocab = hfConfig.vocab_size as number;
  const rng = new Rng(7);
  const { weights, tensors } = randomCheckpoint(config, llamaFamily, rng, { scale: { normal: 0.3, ones: 1 } });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "llama-logits-"));
  try {
    writeDirectory(dir, tensors, false);
    const model = new Gpt(config, { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), seed: 1 });
    importWeights(dir, config, llamaFamily, model.params);
    const ids = Array.from({ length }, () => rng.int(vocab));
    const logits = (await model.forward(Tensor.from("int32", [1, ids.length], ids))).logits.data as Float32Array;
    return relativeError(logits, referenceLogProbs(weights, referenceConfig, ids), vocab);
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

  it("RoPE scaling yarn (head dim 8, context 256: pair 0 kept, 1 ramped, 2 and 3 divided; cos and sin times 0.1 ln 4 + 1): log-probabilities within 1e-4", async () => {
    const yarn = { rope_type: "yarn", factor: 4, original_max_position_embeddings: 256 } as const;
    // beta_fast's dimension 8 ln(256 / 64 pi) / (2 ln 10000) = 0.11 (floored: 0), beta_slow's 1.61 (ceiled: 2): pair 1 halfway
    const inverse = [0, 1, 2, 3].map((j) => inverseFrequency(j, 8, 10000, yarn as HfRopeScaling) / 10000 ** (-j / 4));
    expect(inverse[0]).toBe(1);
    expect(inverse[1]).toBeCloseTo(0.625, 12);
    expect(inverse[2]).toBeCloseTo(0.25, 12);
    expect(inverse[3]).toBeCloseTo(0.25, 12);
    const config = { ...scaled, max_position_embeddings: 1024, rope_scaling: yarn };
    expect(await worstDifference(config, 40)).toBeLessThan(1e-4);
    // the attention factor counts: the reference without it (attention_factor 1) is another model
    expect(await worstDifference(config, 40, { ...config, rope_scaling: { ...yarn, attention_factor: 1 } })).toBeGreaterThan(1e-3);
  });

  it("RoPE scaling linear (factor 2.5): log-probabilities within 1e-4", async () => {
    expect(await worstDifference({ ...scaled, rope_scaling: { rope_type: "linear", factor: 2.5 } }, 40)).toBeLessThan(1e-4);
  });
});
