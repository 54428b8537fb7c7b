/**
 * The block config's attention variants: a head width of its own, the
 * per-projection biases and q/k norms, their defaults (as before: no
 * biases, hidden / heads), and what is refused, each naming the value.
 */
import { describe, expect, it } from "vitest";
import { hasBias, resolveBlockConfig } from "./block-config.js";
import { blockWeightSpecs } from "./block-weights.js";

const LINEARS = ["attn.q", "attn.k", "attn.v", "attn.o", "mlp.gate", "mlp.up", "mlp.down"];
const biased = (config: Parameters<typeof resolveBlockConfig>[0]) => LINEARS.filter((n) => hasBias(resolveBlockConfig(config), n));

describe("block config: attention variants", () => {
  it("defaults: no biases, no q/k norms, headDim = hidden / heads", () => {
    const c = resolveBlockConfig({ hidden: 16, heads: 4 });
    expect([c.attentionBias, c.mlpBias, c.qkNorm, c.headDim]).toEqual(["none", false, false, 4]);
  });

  it("bias true is every linear; attentionBias and mlpBias choose", () => {
    expect(biased({ hidden: 8, heads: 2, bias: true })).toEqual(LINEARS);
    expect(biased({ hidden: 8, heads: 2, bias: true, attentionBias: "qkvo", mlpBias: true })).toEqual(LINEARS);
    expect(biased({ hidden: 8, heads: 2, attentionBias: "qkv" })).toEqual(["attn.q", "attn.k", "attn.v"]);
    expect(biased({ hidden: 8, heads: 2, attentionBias: "qkvo" })).toEqual(["attn.q", "attn.k", "attn.v", "attn.o"]);
    expect(biased({ hidden: 8, heads: 2, mlpBias: true })).toEqual(["mlp.gate", "mlp.up", "mlp.down"]);
  });

  it("a head width of its own: q [hidden, heads x headDim], o [heads x headDim, hidden], hidden need not divide by heads", () => {
    const c = resolveBlockConfig({ hidden: 12, heads: 5, kvHeads: 1, headDim: 4, qkNorm: true });
    const shapes = Object.fromEntries(blockWeightSpecs(c).map((s) => [s.name, s.shape]));
    expect([shapes["attn.q.w"], shapes["attn.k.w"], shapes["attn.o.w"], shapes["attn.q_norm.gamma"], shapes["attn.k_norm.gamma"]]).toEqual([
      [12, 20],
      [12, 4],
      [20, 12],
      [4],
      [4],
    ]);
  });

  it("refuses an odd or non-integer headDim, an unknown attentionBias, non-booleans, and bias true against fewer biases", () => {
    expect(() => resolveBlockConfig({ hidden: 8, heads: 2, headDim: 3 })).toThrow("block config: headDim 3 must be even for RoPE");
    expect(() => resolveBlockConfig({ hidden: 8, heads: 2, headDim: 2.5 })).toThrow("block config: headDim must be a positive integer, got 2.5");
    expect(() => resolveBlockConfig({ hidden: 10, heads: 4 })).toThrow("block config: hidden (10) must be divisible by heads (4)");
    expect(() => resolveBlockConfig({ hidden: 8, heads: 2, attentionBias: "qk" as never })).toThrow(
      'block config: attentionBias must be one of none, qkv, qkvo, got "qk"',
    );
    expect(() => resolveBlockConfig({ hidden: 8, heads: 2, qkNorm: 1 as never })).toThrow("block config: qkNorm must be true or false, got 1");
    expect(() => resolveBlockConfig({ hidden: 8, heads: 2, bias: true, attentionBias: "qkv" })).toThrow(
      'block config: bias true (a bias on every linear) contradicts attentionBias "qkv"',
    );
    expect(() => resolveBlockConfig({ hidden: 8, heads: 2, bias: true, mlpBias: false })).toThrow("contradicts attentionBias undefined / mlpBias false");
  });
});
