import { describe, expect, it } from "vitest";
import * as ort from "onnxruntime-node";
import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import { Rng, Tensor } from "@ulysses/tensors";
import { buildOnnxModel } from "./export-onnx.js";
import { Gpt } from "./gpt.js";
import type { GptConfig } from "./gpt-config.js";

const base: GptConfig = { vocab: 40, hidden: 16, heads: 4, kvHeads: 2, layers: 2, mlp: "gelu", mlpRatio: 2, maxSeq: 32, tiedHead: false };

/** The worst difference between onnxruntime's logits of the export and the training forward's, relative to their largest; `plain`: the
 * training forward of the same weights without RoPE scaling instead. */
async function compare(config: GptConfig, plain = false): Promise<number> {
  const model = new Gpt(config, { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), seed: 3 });
  // perturb norms so every weight matters
  const rng = new Rng(5);
  for (const spec of model.params.specs)
    if (spec.init !== "normal") for (const [i] of model.params.value(spec.name).data.entries()) model.params.value(spec.name).data[i] += 0.1 * rng.normal();
  const batch = 2;
  const seq = 13;
  const ids = new Tensor("int32", [batch, seq]);
  for (let i = 0; i < ids.size; i++) ids.data[i] = rng.int(config.vocab);
  const reference = plain
    ? new Gpt({ ...config, ropeScaling: undefined }, { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), seed: 3 })
    : model;
  if (plain) reference.params.values.set(model.params.values);
  const expected = (await reference.forward(ids)).logits.data;
  const session = await ort.InferenceSession.create(await buildOnnxModel(config, model.params.values));
  const feeds = {
    ids: new ort.Tensor(
      "int64",
      BigInt64Array.from(ids.data, (v) => BigInt(v)),
      [batch, seq],
    ),
  };
  const out = (await session.run(feeds)).logits!;
  expect(out.dims).toEqual([batch, seq, config.vocab]);
  const got = out.data as Float32Array;
  let worst = 0;
  let scale = 0;
  for (let i = 0; i < expected.length; i++) {
    worst = Math.max(worst, Math.abs(got[i]! - expected[i]!));
    scale = Math.max(scale, Math.abs(expected[i]!));
  }
  await session.release();
  return worst / scale;
}

describe("ONNX export", () => {
  it("onnxruntime-node alone reproduces the training forward's logits (GELU, GQA, untied)", async () => {
    expect(await compare(base)).toBeLessThan(1e-5);
  });
  it("and with a llama family's config: an MLP width not a multiple of hidden, its own eps and RoPE base", async () => {
    expect(await compare({ ...base, mlp: "swiglu", norm: "rmsnorm", mlpHidden: 40, eps: 1e-6, ropeBase: 500000 })).toBeLessThan(1e-5);
  });
  // head dim 8, base 10000: wavelengths 6.3, 63, 628, 6283 against bands 16 and 64 (context 64): one pair kept, one interpolated, two divided
  const llama3 = { type: "llama3", factor: 4, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 64 } as const;
  // yarn over a context of 64: pair 0 kept, 1 ramped, 2 and 3 divided; cos and sin times 1.25
  const yarn = { type: "yarn", factor: 4, originalMaxPositions: 64, betaFast: 32, betaSlow: 1, attentionFactor: 1.25, truncate: true } as const;
  for (const ropeScaling of [llama3, { type: "linear", factor: 3 } as const, yarn]) {
    it(`and with ${ropeScaling.type} RoPE scaling (the export's tables scaled as training's are; unscaled logits differ)`, async () => {
      const config: GptConfig = { ...base, hidden: 32, mlp: "swiglu", norm: "rmsnorm", ropeScaling };
      expect(await compare(config)).toBeLessThan(1e-5);
      expect(await compare(config, true)).toBeGreaterThan(1e-4);
    });
  }
  it("and with a qwen3-shaped config: head width 6 on hidden 16 with 4 heads, per-head q/k norms, GQA", async () => {
    expect(await compare({ ...base, mlp: "swiglu", norm: "rmsnorm", headDim: 6, qkNorm: true, mlpHidden: 24, eps: 1e-6, ropeBase: 1e6 })).toBeLessThan(1e-5);
  });
  it("and with per-projection biases: q, k, v only (qwen2), and every linear (llama's attention_bias and mlp_bias)", async () => {
    expect(await compare({ ...base, mlp: "swiglu", norm: "rmsnorm", attentionBias: "qkv", tiedHead: true })).toBeLessThan(1e-5);
    expect(await compare({ ...base, mlp: "swiglu", norm: "rmsnorm", attentionBias: "qkvo", mlpBias: true, headDim: 8, qkNorm: true })).toBeLessThan(1e-5);
  });
  it("and with SwiGLU, RMSNorm and a tied head", async () => {
    expect(await compare({ ...base, mlp: "swiglu", norm: "rmsnorm", tiedHead: true, kvHeads: 1 })).toBeLessThan(1e-5);
  });
});
