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
import { Gpt, HEAD_GRADIENT_BLOCK_BYTES, headGradientColumns } from "./gpt.js";
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

/** ReferenceOps with linearWeightGradientInto (its float32 weight gradient added in place), counting the calls: Gpt's head then adds into the flat gradient. */
class InPlaceOps extends ReferenceOps {
  calls = 0;
  async linearWeightGradientInto(x: Tensor<"float32">, dy: Tensor<"float32">, into: Tensor<"float32">): Promise<void> {
    this.calls++;
    const dw = await this.linearWeightGradient(x, dy);
    for (let i = 0; i < into.size; i++) into.data[i] += dw.data[i]!;
  }
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

  for (const tiedHead of [false, true]) {
    it(`${tiedHead ? "tied" : "untied"} head: backward in blocks of 1, 5 and 32 vocabulary columns and in place (ops.linearWeightGradientInto) adds h^T dLogits (float64) into the gradient and returns dLogits W^T`, async () => {
      const gpt = model(tiedHead);
      const h = new Tensor("float32", [7, config.hidden]);
      new Rng(3, 1).fillNormal(h.data, 0, 1);
      const dLogits = new Tensor("float32", [7, config.vocab]);
      new Rng(3, 2).fillNormal(dLogits.data, 0, 1);
      const name = tiedHead ? "embed.weight" : "head.w";
      // W [hidden, vocab] = head.w, or the embedding [vocab, hidden] transposed
      const weight = (i: number, o: number) =>
        tiedHead ? gpt.params.value(name).data[o * config.hidden + i]! : gpt.params.value(name).data[i * config.vocab + o]!;
      const gradAt = (i: number, o: number) => (tiedHead ? o * config.hidden + i : i * config.vocab + o);
      const inPlace = new InPlaceOps();
      const gptInPlace = new Gpt({ ...config, tiedHead }, { ops: inPlace, localAttention: new ReferenceAttention(), seed: 4, mlpTileRows: 4 });
      for (const gradientColumns of [1, 5, 32, "in place"] as const) {
        const before = Float64Array.from({ length: config.hidden * config.vocab }, (_, k) => ((k * 37) % 11) - 5);
        const under = gradientColumns === "in place" ? gptInPlace : gpt;
        under.params.grad(name).data.set(before);
        const dh = gradientColumns === "in place" ? await gptInPlace.lmHead().backward(h, dLogits) : await gpt.lmHead({ gradientColumns }).backward(h, dLogits);
        if (gradientColumns === "in place") expect(inPlace.calls, "linearWeightGradientInto used").toBe(1);
        const grad = under.params.grad(name).data;
        let worst = 0;
        for (let i = 0; i < config.hidden; i++) {
          for (let o = 0; o < config.vocab; o++) {
            let dw = 0;
            for (let r = 0; r < 7; r++) dw += h.data[r * config.hidden + i]! * dLogits.data[r * config.vocab + o]!;
            worst = Math.max(worst, Math.abs(grad[gradAt(i, o)]! - before[gradAt(i, o)]! - dw));
          }
        }
        expect(worst, `weight gradient, ${gradientColumns} columns`).toBeLessThan(1e-5);
        worst = 0;
        for (let r = 0; r < 7; r++) {
          for (let i = 0; i < config.hidden; i++) {
            let dx = 0;
            for (let o = 0; o < config.vocab; o++) dx += dLogits.data[r * config.vocab + o]! * weight(i, o);
            worst = Math.max(worst, Math.abs(dh.data[r * config.hidden + i]! - dx));
          }
        }
        expect(worst, `dh, ${gradientColumns} columns`).toBeLessThan(1e-5);
      }
      expect(() => gpt.lmHead({ gradientColumns: 0 })).toThrow(/gradientColumns must be a positive integer, got 0/);
      expect(() => new Gpt(config, { ops, localAttention: new ReferenceAttention(), seed: 4, headGradientColumns: 2.5 })).toThrow(
        /Gpt: headGradientColumns must be a positive integer, got 2.5/,
      );
    });
  }

  it("headGradientColumns keeps a block of the head's weight gradient and its dLogits columns within HEAD_GRADIENT_BLOCK_BYTES", () => {
    expect(HEAD_GRADIENT_BLOCK_BYTES).toBe(4 * 1024 * 1024);
    // 4 MiB / (4 bytes x 256) = 4096 columns; 4096 rows -> 256 columns; a whole vocabulary that fits stays one block
    expect(headGradientColumns(256, 32768, 64)).toBe(4096);
    expect(headGradientColumns(256, 32768, 4096)).toBe(256);
    expect(headGradientColumns(256, 256, 4096)).toBe(256);
    expect(headGradientColumns(8192, 32768, 1)).toBe(128);
  });

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
