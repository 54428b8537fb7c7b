/**
 * Decoding with the key-value cache against the model's full forward (the
 * reference: the whole sequence at once, no cache): the logits of every
 * decoded position, after a prefill, a multi-token append and single tokens,
 * must equal the full forward's logits of the same sequence within 1e-4
 * (reference kernels, no cache), with the reference attention and
 * OrtAttention inside the cache, for
 * a grouped-query rmsnorm/swiglu config with RoPE theta and for the gpt
 * layernorm/gelu config.
 */
import { OrtAttention, ReferenceAttention, ReferenceOps, type LocalAttention } from "@ulysses/kernels";
import { Rng, Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import type { GptConfig } from "./gpt-config.js";
import { Gpt } from "./gpt.js";
import { GptDecoder, KvCacheAttention } from "./kv-cache.js";

const configs: [string, GptConfig][] = [
  [
    "GQA rmsnorm/swiglu, RoPE theta 1e4, untied",
    {
      vocab: 20,
      hidden: 16,
      heads: 4,
      kvHeads: 2,
      layers: 2,
      mlp: "swiglu",
      mlpRatio: 2.5,
      mlpHidden: 40,
      maxSeq: 32,
      tiedHead: false,
      norm: "rmsnorm",
      eps: 1e-6,
    },
  ],
  ["gpt layernorm/gelu, tied", { vocab: 20, hidden: 16, heads: 2, kvHeads: 2, layers: 2, mlp: "gelu", mlpRatio: 2, maxSeq: 32, tiedHead: true }],
];

/** A model with weights large enough that attention and every layer matter. */
function model(config: GptConfig): Gpt {
  const gpt = new Gpt(config, { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), seed: 1 });
  const rng = new Rng(5);
  const values = gpt.params.values;
  for (let i = 0; i < values.length; i++) values[i] = values[i]! + 0.3 * rng.normal();
  return gpt;
}

const kernels: [string, () => LocalAttention][] = [
  ["reference attention", () => new ReferenceAttention()],
  // its appends of several tokens to a filled cache run with fewer queries than keys (bottom-right causal)
  ["OrtAttention", () => new OrtAttention({ threads: 1 })],
];

describe("GptDecoder (key-value cache) against the full forward", () => {
  for (const [name, config] of configs)
    for (const [kernelName, kernel] of kernels) {
      it(`${name}, ${kernelName}: every decoded position's logits within 1e-4`, async () => {
        const gpt = model(config);
        const rng = new Rng(9);
        const ids = Array.from({ length: 14 }, () => rng.int(config.vocab));
        const full = (await gpt.forward(Tensor.from("int32", [1, ids.length], ids))).logits.data;
        const row = (p: number) => full.subarray(p * config.vocab, (p + 1) * config.vocab);
        const local = kernel();
        const decoder = new GptDecoder(gpt, local);
        const checked: number[] = [];
        const check = (logits: Float32Array, p: number) => {
          let worst = 0;
          for (let t = 0; t < config.vocab; t++) worst = Math.max(worst, Math.abs(logits[t]! - row(p)[t]!));
          expect(worst, `position ${p}`).toBeLessThan(1e-4);
          checked.push(p);
        };
        // prefill 5, then 3 at once (causal within them), then one at a time
        check(await decoder.append(ids.slice(0, 5)), 4);
        check(await decoder.append(ids.slice(5, 8)), 7);
        for (let p = 8; p < ids.length; p++) {
          check(await decoder.append([ids[p]!]), p);
          expect(decoder.length).toBe(p + 1);
        }
        expect(checked).toEqual([4, 7, 8, 9, 10, 11, 12, 13]);
        // the full forward's row differs from a different prefix's: the check can fail
        decoder.reset();
        const other = await decoder.append([ids[1]!, ...ids.slice(1, 5)]);
        expect(Math.max(...other.map((v, t) => Math.abs(v - row(4)[t]!)))).toBeGreaterThan(1e-3);
        decoder.restore();
        expect(gpt.blocks.every((b) => !(b.attention instanceof KvCacheAttention))).toBe(true);
        await (local as { release?: () => Promise<void> }).release?.();
      });
    }

  it("refuses to go past maxSeq, and has no backward", async () => {
    const config = configs[1]![1];
    const gpt = model({ ...config, maxSeq: 6 });
    const decoder = new GptDecoder(gpt, new ReferenceAttention());
    await decoder.append([1, 2, 3, 4]);
    await expect(decoder.append([1, 2, 3])).rejects.toThrow(/4 decoded \+ 3 new tokens exceed maxSeq 6/);
    await expect(decoder.caches[0]!.backward()).rejects.toThrow(/forward only/);
  });
});
