import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import { Rng, Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { buildOnnxModel } from "./export-onnx.js";
import type { GptConfig } from "./gpt-config.js";
import { Gpt } from "./gpt.js";
import { OnnxLM } from "./onnx-lm.js";

const config: GptConfig = { vocab: 24, hidden: 16, heads: 4, kvHeads: 2, layers: 1, mlp: "gelu", mlpRatio: 2, maxSeq: 8, tiedHead: true };

async function setup(): Promise<{ model: Gpt; lm: OnnxLM }> {
  const model = new Gpt(config, { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), seed: 11 });
  return { model, lm: await OnnxLM.create(await buildOnnxModel(config, model.params.values), config, "tiny.onnx") };
}

/** The training forward's logits [n, vocab] of one sequence (the reference: the same model on the reference kernels). */
async function forwardLogits(model: Gpt, ids: readonly number[]): Promise<Float32Array> {
  return (await model.forward(Tensor.from("int32", [1, ids.length], ids))).logits.data as Float32Array;
}

const argmax = (row: Float32Array) => row.reduce((best, v, i) => (v > row[best]! ? i : best), 0);

describe("OnnxLM", () => {
  it("gives the training forward's logits of the last maxSeq tokens", async () => {
    const { model, lm } = await setup();
    const rng = new Rng(3);
    const ids = Array.from({ length: 11 }, () => rng.int(config.vocab));
    const got = await lm.logits(ids);
    const expected = await forwardLogits(model, ids.slice(-config.maxSeq));
    expect(got.length).toBe(config.maxSeq * config.vocab);
    for (let i = 0; i < got.length; i++) expect(got[i]).toBeCloseTo(expected[i]!, 4);
    await lm.release();
  });

  it("decodes greedily token by token: each token is the argmax of the forward over everything before it", async () => {
    const { model, lm } = await setup();
    const prompt = [1, 2, 3];
    const tokens: number[] = [];
    for await (const token of lm.generate(prompt, 7, { temperature: 0 }, () => 0.5)) tokens.push(token);
    const context = [...prompt];
    for (const token of tokens) {
      const logits = await forwardLogits(model, context.slice(-config.maxSeq));
      const n = Math.min(context.length, config.maxSeq);
      expect(token).toBe(argmax(logits.subarray((n - 1) * config.vocab, n * config.vocab)));
      context.push(token);
    }
    expect(tokens).toHaveLength(7);
    await lm.release();
  });

  it("names the source when the bytes are not a model or the vocabulary disagrees", async () => {
    await expect(OnnxLM.create(new Uint8Array([1, 2, 3]), config, "broken.onnx")).rejects.toThrow(/model file 'broken.onnx' cannot be loaded by ONNX Runtime/);
    const { model } = await setup();
    const wrong = await OnnxLM.create(await buildOnnxModel(config, model.params.values), { ...config, vocab: 30 }, "tiny.onnx");
    await expect(wrong.logits([1, 2])).rejects.toThrow(/model 'tiny.onnx' gives logits \[1, 2, 24\], expected \[1, 2, 30\]/);
    await wrong.release();
  });
});
