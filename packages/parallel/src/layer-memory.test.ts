/**
 * The memory account's per-token terms of the attention variants against
 * what a one-device block actually saves (BlockContext.savedBytes): the
 * per-head q/k norms' inputs and statistics, and a head width other than
 * hidden / heads, each change the account by what they change the block.
 */
import { TransformerBlock, initBlockWeights, resolveBlockConfig, type BlockConfig } from "@ulysses/block";
import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import { randomTensor, seededRandom } from "@ulysses/kernels/testing";
import type { GptConfig } from "@ulysses/model";
import { describe, expect, it } from "vitest";
import { layerFloatsPerToken } from "./layer-memory.js";

const [batch, seq] = [2, 5];

/**
 * Floats per token a block of `config` saves for backward (the input
 * included), the attention's output once: savedBytes counts its one buffer
 * twice (attn.o's saved input and the attention context's out).
 */
async function savedPerToken(config: BlockConfig): Promise<number> {
  const c = resolveBlockConfig(config);
  const block = new TransformerBlock(config, { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), weights: initBlockWeights(c, 1) });
  const { context } = await block.forward(randomTensor([batch, seq, c.hidden], seededRandom(3)));
  const floats = context.savedBytes / 4 / (batch * seq) - c.heads * c.headDim;
  block.release(context);
  return floats;
}

const model: GptConfig = { vocab: 8, hidden: 16, heads: 4, kvHeads: 2, layers: 1, mlp: "swiglu", mlpRatio: 2, maxSeq: 16, tiedHead: false, norm: "rmsnorm" };
const blockOf = (m: GptConfig): BlockConfig => ({ ...m, causal: true });

describe("layerFloatsPerToken: the attention variants", () => {
  it("q/k norms and a head width of 6 change the saved floats per token as they change the block's", async () => {
    const variants: GptConfig[] = [
      { ...model, qkNorm: true },
      { ...model, headDim: 6 },
      { ...model, headDim: 6, qkNorm: true, attentionBias: "qkv" },
    ];
    const base = layerFloatsPerToken(model, 1, "ulysses").saved;
    const measuredBase = await savedPerToken(blockOf(model));
    for (const variant of variants) {
      const account = layerFloatsPerToken(variant, 1, "ulysses").saved - base;
      const measured = (await savedPerToken(blockOf(variant))) - measuredBase;
      expect(account, JSON.stringify(variant)).toBe(measured);
      expect(account).toBeGreaterThan(0);
    }
  });

  it("q/k norms add their inputs and statistics to a checkpointed block's recompute and to a head group's", () => {
    // (a tiled MLP, so the attention's backward is the larger working set)
    const plain = layerFloatsPerToken(model, 1, "ulysses", 1, true, 2);
    const normed = layerFloatsPerToken({ ...model, qkNorm: true }, 1, "ulysses", 1, true, 2);
    // q [16] and k [8] before their norms, one rstd per head (4 + 2): over 2 groups; and their gradient of q's width
    expect(normed.backward - plain.backward).toBe((16 + 8 + 4 + 2) / 2 + 16 / 2);
    const recomputed = layerFloatsPerToken({ ...model, qkNorm: true }, 1, "ulysses").recomputed - layerFloatsPerToken(model, 1, "ulysses").recomputed;
    expect(recomputed).toBe(16 + 8 + 4 + 2);
  });
});
