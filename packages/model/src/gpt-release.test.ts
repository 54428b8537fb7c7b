/**
 * Gpt's and its blocks' BlockOps.release calls release only dead tensors: a
 * whole step (forward, backward) on PoisoningOps (every released tensor
 * overwritten with NaN on the spot) gives the parameter gradients of the same
 * step on ReferenceOps bit for bit, and releases no parameter, no gradient
 * and nothing twice.
 */
import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import { PoisoningOps } from "@ulysses/kernels/testing";
import { Rng, Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { Gpt, type GptOptions } from "./gpt.js";
import type { GptConfig } from "./gpt-config.js";

const config: GptConfig = { vocab: 32, hidden: 16, heads: 4, kvHeads: 2, layers: 3, mlp: "gelu", mlpRatio: 2, maxSeq: 64, tiedHead: false };
const tokens = new Tensor(
  "int32",
  [2, 9],
  Int32Array.from({ length: 18 }, (_, i) => (i * 7) % 32),
);

async function gradients(ops: ReferenceOps, tiedHead: boolean, options: Partial<GptOptions>): Promise<{ gpt: Gpt; grads: Float32Array }> {
  const gpt = new Gpt({ ...config, tiedHead }, { ops, localAttention: new ReferenceAttention(), seed: 4, ...options });
  const context = await gpt.forward(tokens);
  const dLogits = new Tensor("float32", [18, config.vocab]);
  new Rng(1, 2).fillNormal(dLogits.data, 0, 1);
  await gpt.backward(context, dLogits);
  return { gpt, grads: gpt.params.grads };
}

describe("Gpt releases only dead tensors", () => {
  const modes: [string, Partial<GptOptions>][] = [
    ["plain", {}],
    ["activation checkpointing", { activationCheckpointing: true }],
    ["MLP tiles of 4 rows", { mlpTileRows: 4 }],
    ["both", { activationCheckpointing: true, mlpTileRows: 4 }],
    ["checkpoints in bf16", { activationCheckpointing: true, bfloat16Checkpoints: true }],
    ["head groups, MLP tiles, kept in bf16", { attentionHeadGroups: 2, mlpTileRows: 4, bfloat16Checkpoints: true }],
  ];
  for (const tiedHead of [false, true]) {
    for (const [mode, options] of modes) {
      it(`${tiedHead ? "tied" : "untied"} head, ${mode}: the same gradients bit for bit, nothing live released`, async () => {
        const want = await gradients(new ReferenceOps(), tiedHead, options);
        const ops = new PoisoningOps();
        const got = await gradients(ops, tiedHead, options);
        expect(Array.from(got.grads)).toEqual(Array.from(want.grads));
        expect(got.grads.some((g) => g !== 0)).toBe(true);
        expect(ops.released.length).toBeGreaterThan(0);
        const live = new Set([got.gpt.params.values.buffer, got.gpt.params.grads.buffer]);
        for (const t of ops.released) expect(live.has(t.data.buffer), `released ${t} is a parameter or gradient view`).toBe(false);
        expect(new Set(ops.released.map((t) => t.data.buffer)).size, "a buffer released twice").toBe(ops.released.length);
      });
    }
  }
});

/**
 * One step of the tied-head model keeping its blocks' tensors in bf16 (bfloat16Checkpoints with `options`), against the
 * float32 step with the same options: each block's saved bytes, whether a kept input holds bf16 values only, and the
 * gradients' relative distance.
 */
async function bfloat16Step(options: Partial<GptOptions>): Promise<{ savedBytes: number[]; bf16Input: boolean; relative: number }> {
  const fp32 = await gradients(new ReferenceOps(), true, options);
  const gpt = new Gpt(
    { ...config, tiedHead: true },
    { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), seed: 4, ...options, bfloat16Checkpoints: true },
  );
  const context = await gpt.forward(tokens);
  const savedBytes = context.blocks.map((c) => c.savedBytes);
  // each element of a bf16 value has its low 16 bits zero
  const input = context.blocks[1]!.input.data;
  const bf16Input = new Uint32Array(input.buffer, input.byteOffset, input.length).every((w) => (w & 0xffff) === 0);
  const dLogits = new Tensor("float32", [18, config.vocab]);
  new Rng(1, 2).fillNormal(dLogits.data, 0, 1);
  await gpt.backward(context, dLogits);
  const got = gpt.params.grads;
  let diff = 0;
  let norm = 0;
  for (let i = 0; i < got.length; i++) {
    diff += (got[i]! - fp32.grads[i]!) ** 2;
    norm += fp32.grads[i]! ** 2;
  }
  return { savedBytes, bf16Input, relative: Math.sqrt(diff / norm) };
}

describe("Gpt's checkpoints in bf16 (bfloat16Checkpoints)", () => {
  it("keep each block input as bf16 (half the bytes) and give gradients near the float32 checkpoints', from the rounded inputs", async () => {
    const step = await bfloat16Step({ activationCheckpointing: true });
    // every block keeps its [2, 9, 16] input in 2 bytes an element
    expect(step.savedBytes).toEqual([2 * 18 * 16, 2 * 18 * 16, 2 * 18 * 16]);
    expect(step.bf16Input).toBe(true);
    // bf16 keeps 8 significant bits (a relative rounding of at most 2^-9 per element): near, and not the float32 bits
    expect(step.relative).toBeLessThan(5e-3);
    expect(step.relative).toBeGreaterThan(1e-5);
  });

  it("with head groups and MLP tiles, keep each block's input and MLP input as bf16, with gradients near the float32 ones", async () => {
    const step = await bfloat16Step({ attentionHeadGroups: 2, mlpTileRows: 4 });
    // every block keeps its [2, 9, 16] input and its [18, 16] MLP input, 2 bytes an element
    expect(step.savedBytes).toEqual([4 * 18 * 16, 4 * 18 * 16, 4 * 18 * 16]);
    expect(step.bf16Input).toBe(true);
    expect(step.relative).toBeLessThan(5e-3);
    expect(step.relative).toBeGreaterThan(1e-5);
  });

  it("needs activation checkpointing, or head groups with MLP tiles", () => {
    const make = (options: Partial<GptOptions>) => () =>
      new Gpt(config, { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), seed: 4, bfloat16Checkpoints: true, ...options });
    const refused = /bfloat16Checkpoints keeps the block inputs .* it needs activationCheckpointing, or attentionHeadGroups > 1 with mlpTileRows > 0/;
    expect(make({})).toThrow(refused);
    expect(make({ attentionHeadGroups: 2 })).toThrow(refused);
    expect(make({ mlpTileRows: 4 })).toThrow(refused);
    expect(make({ attentionHeadGroups: 2, mlpTileRows: 4 })).not.toThrow();
  });
});
