/**
 * Attention in head groups (`attentionHeadGroups`) against the plain block
 * (which reference-block.test.ts holds to a float64 composition): the same
 * output, input gradient and weight gradients for every MLP, norm, bias,
 * grouped-query layout, group count, with and without checkpointing and a
 * tiled MLP, with per-token positions and packed documents, and with RoPE
 * scaling (also checkpointed without groups); what a grouped block saves;
 * the kept outputs (keepAttentionOutputs): the same bits as the recompute,
 * one attention forward per group, what they add to the context; the
 * validation of the group count, of keepAttentionOutputs and of the RoPE
 * scaling.
 */
import { ReferenceAttention, ReferenceOps, type LocalAttention } from "@ulysses/kernels";
import { randomTensor, seededRandom } from "@ulysses/kernels/testing";
import type { Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { resolveBlockConfig, type BlockConfig } from "./block-config.js";
import { initBlockWeights, type BlockWeights } from "./block-weights.js";
import { BlockError } from "./errors.js";
import { expectSameStep } from "./testing-fixtures/same-step.js";
import { TransformerBlock, type BlockForwardOptions, type TransformerBlockOptions } from "./transformer-block.js";
import type { BlockAttention } from "./block-attention.js";

type F32 = Tensor<"float32">;

const [batch, seq] = [2, 6];

function block(config: BlockConfig, weights: BlockWeights, options: Partial<TransformerBlockOptions> = {}): TransformerBlock {
  return new TransformerBlock(config, { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), weights, ...options });
}

async function step(b: TransformerBlock, x: F32, dy: F32, call: BlockForwardOptions = {}) {
  const { y, context } = await b.forward(x, call);
  const savedBytes = context.savedBytes;
  const g = await b.backward(context, dy);
  return { y, dx: g.dx, grads: g.grads, savedBytes };
}

/** Per-token positions restarting at a document boundary, and two documents per row. */
function packed(): BlockForwardOptions {
  const positions = new Int32Array(batch * seq);
  const documents = new Int32Array(batch * seq);
  for (let b = 0; b < batch; b++)
    for (let t = 0; t < seq; t++) {
      const second = t >= 2 + b;
      positions[b * seq + t] = second ? t - (2 + b) : t;
      documents[b * seq + t] = second ? 1 : 0;
    }
  return { positions, documents };
}

describe("attention in head groups equals the plain block", () => {
  const layouts = [
    { heads: 4, kvHeads: 4, groups: [2, 4] },
    { heads: 4, kvHeads: 2, groups: [2] },
    { heads: 6, kvHeads: 3, groups: [3] },
  ];
  for (const mlp of ["gelu", "swiglu"] as const) {
    for (const norm of ["layernorm", "rmsnorm"] as const) {
      for (const bias of [false, true]) {
        for (const { heads, kvHeads, groups } of layouts) {
          const config: BlockConfig = { hidden: 4 * heads, heads, kvHeads, mlpRatio: 2, mlp, norm, bias };
          const c = resolveBlockConfig(config);
          const weights = initBlockWeights(c, 3, { perturb: 0.2, std: 0.4 });
          const random = seededRandom(11);
          const x = randomTensor([batch, seq, c.hidden], random);
          const dy = randomTensor([batch, seq, c.hidden], random);
          for (const attentionHeadGroups of groups) {
            for (const mode of [
              {},
              { checkpoint: true },
              { checkpoint: true, mlpTileRows: 5 },
              { headGroupTileRows: 5 },
              { checkpoint: true, headGroupTileRows: 1 },
              { keepAttentionOutputs: true, headGroupTileRows: 5 },
              { keepAttentionOutputs: true, mlpTileRows: 5 },
            ]) {
              for (const [callName, call] of [
                ["positions from 0", {}],
                ["packed documents", packed()],
              ] as const) {
                it(`${mlp}, ${norm}, bias ${bias}, ${heads}/${kvHeads} heads in ${attentionHeadGroups} groups, ${JSON.stringify(mode)}, ${callName}`, async () => {
                  const want = await step(block(config, weights), x, dy, call);
                  const got = await step(block(config, weights, { ...mode, attentionHeadGroups }), x, dy, call);
                  expectSameStep(c, got, want);
                });
              }
            }
          }
        }
      }
    }
  }
});

describe("with RoPE scaling, head groups and checkpointing equal the plain block", () => {
  for (const ropeScaling of [
    { type: "llama3", factor: 4, lowFreqFactor: 1, highFreqFactor: 8, originalMaxPositions: 64 },
    { type: "linear", factor: 3 },
  ] as const) {
    const config: BlockConfig = { hidden: 32, heads: 4, kvHeads: 2, mlpRatio: 2, mlp: "swiglu", norm: "rmsnorm", ropeScaling };
    const c = resolveBlockConfig(config);
    const weights = initBlockWeights(c, 3, { perturb: 0.2, std: 0.4 });
    const random = seededRandom(12);
    const x = randomTensor([batch, seq, c.hidden], random);
    const dy = randomTensor([batch, seq, c.hidden], random);
    for (const mode of [{ checkpoint: true }, { attentionHeadGroups: 2 }, { attentionHeadGroups: 2, checkpoint: true, headGroupTileRows: 5 }]) {
      it(`${ropeScaling.type}, ${JSON.stringify(mode)}, packed documents`, async () => {
        const want = await step(block(config, weights), x, dy, packed());
        expectSameStep(c, await step(block(config, weights, mode), x, dy, packed()), want);
      });
    }
  }
  it("a malformed scaling is refused by the block config, naming the field", () => {
    const config = { hidden: 16, heads: 2, ropeScaling: { type: "llama3", factor: 4, lowFreqFactor: 2, highFreqFactor: 2, originalMaxPositions: 64 } } as const;
    expect(() => resolveBlockConfig(config)).toThrow(BlockError);
    expect(() => resolveBlockConfig(config)).toThrow("block config: ropeScaling.highFreqFactor (2) must be greater than ropeScaling.lowFreqFactor (2)");
    const resolved = resolveBlockConfig({ hidden: 16, heads: 2, ropeScaling: { type: "linear", factor: 2 } });
    expect(resolved.ropeScaling).toEqual({ type: "linear", factor: 2 });
    expect(resolveBlockConfig({ hidden: 16, heads: 2 }).ropeScaling).toBeUndefined();
  });
});

describe("what a grouped block saves", () => {
  it("keeps nothing of the attention half: x, and the MLP's own tensors when not checkpointing", async () => {
    const config: BlockConfig = { hidden: 16, heads: 4, mlpRatio: 2 };
    const c = resolveBlockConfig(config);
    const weights = initBlockWeights(c, 5);
    const random = seededRandom(2);
    const x = randomTensor([batch, seq, c.hidden], random);
    const dy = randomTensor([batch, seq, c.hidden], random);
    const rows = batch * seq;
    // checkpointing: x only
    expect((await step(block(config, weights, { attentionHeadGroups: 2, checkpoint: true }), x, dy)).savedBytes).toBe(4 * rows * c.hidden);
    // tiled MLP: x and x2
    expect((await step(block(config, weights, { attentionHeadGroups: 2, mlpTileRows: 4 }), x, dy)).savedBytes).toBe(4 * 2 * rows * c.hidden);
    // plain MLP: x, x2 (norm2's input), its mean and rstd, h2 (up's input), up's output and the GELU output
    const mlp = 2 * rows * c.hidden + 2 * rows + 2 * rows * c.mlpHidden;
    expect((await step(block(config, weights, { attentionHeadGroups: 4 }), x, dy)).savedBytes).toBe(4 * (rows * c.hidden + mlp));
  });
});

describe("attentionHeadGroups validation", () => {
  const config: BlockConfig = { hidden: 16, heads: 4, kvHeads: 2 };
  const weights = initBlockWeights(resolveBlockConfig(config), 1);
  it.each([0, 1.5, -2, "2" as unknown as number])("%s is refused naming it", (bad) => {
    const make = () => block(config, weights, { attentionHeadGroups: bad });
    expect(make).toThrow(BlockError);
    expect(make).toThrow(`attentionHeadGroups must be a positive integer (1: off), got ${String(bad)}`);
  });
  it("a count that does not divide the heads and the kv heads is refused naming both", () => {
    expect(() => block(config, weights, { attentionHeadGroups: 4 })).toThrow(
      "attentionHeadGroups 4 must divide both heads (4) and kvHeads (2), so each group keeps its kv heads",
    );
    expect(block(config, weights, { attentionHeadGroups: 2 }).attentionHeadGroups).toBe(2);
    expect(block(config, weights).attentionHeadGroups).toBe(1);
  });
});

/** A kernel that counts its forward calls. */
function countingAttention(): { local: LocalAttention; forwards: () => number } {
  const inner = new ReferenceAttention();
  let calls = 0;
  const local: LocalAttention = {
    name: "counting",
    forward: (...args) => {
      calls++;
      return inner.forward(...args);
    },
    backward: (...args) => inner.backward(...args),
    release: () => inner.release(),
  };
  return { local, forwards: () => calls };
}

describe("keepAttentionOutputs: each group's output kept, its context rebuilt in backward", () => {
  const config: BlockConfig = { hidden: 32, heads: 4, kvHeads: 2, mlpRatio: 2, mlp: "swiglu", norm: "rmsnorm", qkNorm: true };
  const c = resolveBlockConfig(config);
  const weights = initBlockWeights(c, 7, { perturb: 0.2, std: 0.4 });
  const random = seededRandom(13);
  const x = randomTensor([batch, seq, c.hidden], random);
  const dy = randomTensor([batch, seq, c.hidden], random);

  it("gives the recompute's bits, with one attention forward per group instead of two, for the outputs and statistics more", async () => {
    const run = async (keepAttentionOutputs: boolean) => {
      const counter = countingAttention();
      const b = new TransformerBlock(config, {
        ops: new ReferenceOps(),
        localAttention: counter.local,
        weights,
        attentionHeadGroups: 2,
        mlpTileRows: 5,
        keepAttentionOutputs,
      });
      return { ...(await step(b, x, dy, packed())), forwards: counter.forwards() };
    };
    const [kept, recomputed] = [await run(true), await run(false)];
    expect(kept.forwards).toBe(2);
    expect(recomputed.forwards).toBe(4);
    expect(kept.y.data).toEqual(recomputed.y.data);
    expect(kept.dx.data).toEqual(recomputed.dx.data);
    for (const name of Object.keys(recomputed.grads)) expect(kept.grads[name]!.data, name).toEqual(recomputed.grads[name]!.data);
    // the groups' outputs [b, s, heads, D] and the kernel's log-sum-exp [b, heads, s], float32
    expect(kept.savedBytes - recomputed.savedBytes).toBe(4 * (batch * seq * c.heads * c.headDim + batch * c.heads * seq));
  });

  it("is refused without head groups, under checkpointing, and with an attention that cannot keep its output", async () => {
    const make = (options: Partial<TransformerBlockOptions>) => () => block(config, weights, { keepAttentionOutputs: true, ...options });
    expect(make({})).toThrow("keepAttentionOutputs keeps the outputs of attention in head groups for backward: it needs attentionHeadGroups > 1 (got 1)");
    expect(make({ attentionHeadGroups: 2, checkpoint: true })).toThrow("and no checkpointing (checkpoint true)");
    const plain = block(config, weights);
    const attention: BlockAttention = {
      name: "no-keep",
      forward: (...args) => plain.attention.forward(...args),
      backward: (...args) => plain.attention.backward(...args),
      release: (...args) => plain.attention.release(...args),
    };
    const b = block(config, weights, { keepAttentionOutputs: true, attentionHeadGroups: 2, attention });
    await expect(b.forward(x)).rejects.toThrow(
      "keepAttentionOutputs needs an attention that keeps its output and restores its context (keepOutput, restore); no-keep does not",
    );
  });
});
