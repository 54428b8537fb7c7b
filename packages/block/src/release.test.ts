/**
 * The block's BlockOps.release calls: every tensor it gives back is dead.
 * The ops under test overwrite each released tensor with NaN on the spot,
 * so a later read of one shows in the step's results; those must equal, bit
 * for bit, the same step on ops without release. Nothing released may be
 * the caller's (x, dy, a weight) or a result (y, dx, a gradient), and no
 * buffer may be given back twice in one step.
 */
import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import { PoisoningOps, randomTensor, seededRandom } from "@ulysses/kernels/testing";
import type { Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { resolveBlockConfig, type BlockConfig } from "./block-config.js";
import { initBlockWeights, type BlockWeights } from "./block-weights.js";
import { TransformerBlock, type TransformerBlockOptions } from "./transformer-block.js";

type F32 = Tensor<"float32">;

const [batch, seq] = [2, 5];

async function step(config: BlockConfig, weights: BlockWeights, ops: ReferenceOps, options: Partial<TransformerBlockOptions>, x: F32, dy: F32, into: boolean) {
  const block = new TransformerBlock(config, { ops, localAttention: new ReferenceAttention(), weights, ...options });
  const { y, context } = await block.forward(x);
  const g = await block.backward(context, into ? dy.clone() : dy, { overwriteDy: into });
  return { y, dx: g.dx, grads: g.grads };
}

const bufferKey = (t: Tensor) => t.data.buffer;

/** The step on PoisoningOps equals the step without release, bit for bit; nothing live or twice released. */
async function expectOnlyDeadReleased(config: BlockConfig, options: Partial<TransformerBlockOptions>, into: boolean) {
  const c = resolveBlockConfig(config);
  const weights = initBlockWeights(c, 3, { perturb: 0.2, std: 0.4 });
  const random = seededRandom(7);
  const x = randomTensor([batch, seq, c.hidden], random);
  const dy = randomTensor([batch, seq, c.hidden], random);
  const want = await step(config, weights, new ReferenceOps(), options, x, dy, into);
  const ops = new PoisoningOps();
  const got = await step(config, weights, ops, options, x, dy, into);

  expect(Array.from(got.y.data)).toEqual(Array.from(want.y.data));
  expect(Array.from(got.dx.data)).toEqual(Array.from(want.dx.data));
  for (const name of Object.keys(want.grads)) expect(Array.from(got.grads[name]!.data), name).toEqual(Array.from(want.grads[name]!.data));

  expect(ops.released.length).toBeGreaterThan(0);
  const live = new Set([x, dy, got.y, got.dx, ...Object.values(got.grads), ...Object.values(weights)].map(bufferKey));
  for (const t of ops.released) expect(live.has(bufferKey(t)), `released ${t} is live`).toBe(false);
  expect(new Set(ops.released.map(bufferKey)).size, "a buffer released twice").toBe(ops.released.length);
}

describe("TransformerBlock releases only dead tensors", () => {
  const modes: [string, Partial<TransformerBlockOptions>][] = [
    ["plain", {}],
    ["checkpoint", { checkpoint: true }],
    ["mlpTileRows 3", { mlpTileRows: 3 }],
    ["mlpTileRows 3, checkpoint", { mlpTileRows: 3, checkpoint: true }],
    ["attention in 2 head groups", { attentionHeadGroups: 2 }],
  ];
  for (const mlp of ["gelu", "swiglu"] as const) {
    for (const norm of ["layernorm", "rmsnorm"] as const) {
      for (const bias of [false, true]) {
        for (const [mode, options] of modes) {
          for (const into of [false, true]) {
            it(`${mlp}, ${norm}, bias ${bias}, ${mode}${into ? ", overwriteDy" : ""}: the same bits, nothing live released`, () =>
              expectOnlyDeadReleased({ hidden: 16, heads: 4, kvHeads: 2, mlpRatio: 3, mlp, norm, bias }, options, into));
          }
        }
      }
    }
  }
});

describe("TransformerBlock with per-head q/k norms, a head width of its own and q/k/v biases releases only dead tensors", () => {
  const config: BlockConfig = { hidden: 12, heads: 4, kvHeads: 2, headDim: 6, qkNorm: true, attentionBias: "qkv", mlp: "swiglu", norm: "rmsnorm", mlpRatio: 2 };
  for (const options of [{}, { checkpoint: true }, { mlpTileRows: 3, checkpoint: true }, { attentionHeadGroups: 2 }] as Partial<TransformerBlockOptions>[]) {
    for (const into of [false, true]) {
      it(`${JSON.stringify(options)}${into ? ", overwriteDy" : ""}: the same bits, nothing live released`, () => expectOnlyDeadReleased(config, options, into));
    }
  }
});
