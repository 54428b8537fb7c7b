/**
 * Cross-checks the block against an independent float64 composition of the
 * reference kernels' math (no wrapper, no communication, no block code):
 * forward outputs directly, and every gradient against central finite
 * differences of that composition (RoPE scaling included: the composition
 * rotates with the scaled frequencies, so a forward or backward that drops
 * the scaling fails). The attention variants (per-projection
 * biases, a head width other than hidden / heads, Qwen3's per-head q/k
 * RMSNorm) are held to it too, with head groups, checkpointing and a tiled MLP.
 */
import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import {
  dot,
  geluForward64,
  layerNormForward64,
  linearForward64,
  maxRelativeError,
  randomTensor,
  referenceForward64,
  rmsNormForward64,
  ropeRotate64,
  seededRandom,
  swigluForward64,
  toFloat64,
  type F64,
} from "@ulysses/kernels/testing";
import { Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { resolveBlockConfig, type BlockConfig, type ResolvedBlockConfig } from "./block-config.js";
import { blockWeightSpecs, initBlockWeights } from "./block-weights.js";
import { TransformerBlock, type TransformerBlockOptions } from "./transformer-block.js";

/** The block's math in float64 on the full sequence: x [b, N, hidden] -> y [b, N, hidden]. */
function block64(c: ResolvedBlockConfig, w: Record<string, F64>, x: F64): F64 {
  const [b, n] = x.shape as [number, number, number];
  const rows = b * n;
  // a bias takes part where the weights have one (which ones exist is checked against the config below)
  const lin = (t: F64, name: string) => linearForward64(t, w[`${name}.w`]!, w[`${name}.b`]);
  const norm = (t: F64, name: string) =>
    c.norm === "rmsnorm" ? rmsNormForward64(t, w[`${name}.gamma`]!, c.eps).y : layerNormForward64(t, w[`${name}.gamma`]!, w[`${name}.beta`]!, c.eps).y;
  const add = (a: F64, d: F64) =>
    new Tensor(
      "float64",
      a.shape,
      a.data.map((v, i) => v + d.data[i]!),
    );
  const x2d = x.reshape([rows, c.hidden]);
  const h1 = norm(x2d, "norm1");
  // [rows, n * D] -> [rows * n, D]: RMSNorm over each head (qkNorm), then -> [b, N, n, D]
  const headNorm = (t: F64, name: string, heads: number) =>
    (c.qkNorm ? rmsNormForward64(t.reshape([rows * heads, c.headDim]), w[`${name}.gamma`]!, c.eps).y : t).reshape([b, n, heads, c.headDim]);
  const q = ropeRotate64(headNorm(lin(h1, "attn.q"), "attn.q_norm", c.heads), 0, c.ropeBase, 1, "rope", c.ropeScaling);
  const k = ropeRotate64(headNorm(lin(h1, "attn.k"), "attn.k_norm", c.kvHeads), 0, c.ropeBase, 1, "rope", c.ropeScaling);
  const v = lin(h1, "attn.v");
  const dims = {
    batch: b,
    seqQ: n,
    seqK: n,
    heads: c.heads,
    kvHeads: c.kvHeads,
    headDim: c.headDim,
    group: c.heads / c.kvHeads,
    scale: 1 / Math.sqrt(c.headDim),
    causal: c.causal,
    offset: 0,
  };
  const o = new Tensor("float64", [rows, c.heads * c.headDim], referenceForward64(q.data, k.data, v.data, dims).out);
  const x2 = add(x2d, lin(o, "attn.o"));
  const h2 = norm(x2, "norm2");
  const act = c.mlp === "swiglu" ? swigluForward64(lin(h2, "mlp.gate"), lin(h2, "mlp.up")) : geluForward64(lin(h2, "mlp.up"));
  return add(x2, lin(act, "mlp.down")).reshape([b, n, c.hidden]);
}

/** The biases each config must have (names of the linears with one). */
const ALL = ["attn.q", "attn.k", "attn.v", "attn.o", "mlp.gate", "mlp.up", "mlp.down"];
const QKV = ["attn.q", "attn.k", "attn.v"];
const configs: { config: BlockConfig; biases: string[]; modes: Partial<TransformerBlockOptions>[] }[] = [
  { config: { hidden: 8, heads: 2, bias: true, mlpRatio: 2 }, biases: ALL.filter((n) => n !== "mlp.gate"), modes: [{}] },
  { config: { hidden: 16, heads: 4, kvHeads: 2, norm: "rmsnorm", mlp: "swiglu", mlpRatio: 2, causal: true }, biases: [], modes: [{}] },
  // Qwen3: head width 6 of 4 heads on hidden 12 (hidden / heads = 3), GQA, per-head q/k norm, no biases
  {
    config: { hidden: 12, heads: 4, kvHeads: 2, headDim: 6, qkNorm: true, norm: "rmsnorm", mlp: "swiglu", mlpHidden: 10 },
    biases: [],
    modes: [{}, { checkpoint: true, mlpTileRows: 4 }, { attentionHeadGroups: 2, checkpoint: true, mlpTileRows: 5, headGroupTileRows: 4 }],
  },
  // Qwen2: q, k, v biases only
  {
    config: { hidden: 16, heads: 4, kvHeads: 2, attentionBias: "qkv", norm: "rmsnorm", mlp: "swiglu", mlpRatio: 2 },
    biases: QKV,
    modes: [{}, { checkpoint: true }, { attentionHeadGroups: 2, mlpTileRows: 4 }],
  },
  // Llama's attention_bias and mlp_bias, a head width above hidden / heads, and q/k norm on top
  {
    config: { hidden: 8, heads: 2, headDim: 6, attentionBias: "qkvo", mlpBias: true, qkNorm: true, norm: "rmsnorm", mlp: "swiglu", mlpRatio: 2 },
    biases: ALL,
    modes: [{}, { attentionHeadGroups: 2, checkpoint: true, mlpTileRows: 3 }],
  },
  { config: { hidden: 8, heads: 2, headDim: 2, mlpBias: true, mlpRatio: 2 }, biases: ["mlp.up", "mlp.down"], modes: [{ checkpoint: true, mlpTileRows: 4 }] },
  // head dim 8: wavelengths 6.3, 63, 628, 6283 against bands 8 and 64: one pair kept, one interpolated, two divided
  {
    config: {
      hidden: 16,
      heads: 2,
      kvHeads: 1,
      norm: "rmsnorm",
      mlp: "swiglu",
      mlpRatio: 2,
      ropeScaling: { type: "llama3", factor: 4, lowFreqFactor: 1, highFreqFactor: 8, originalMaxPositions: 64 },
    },
    biases: [],
    modes: [{}],
  },
  { config: { hidden: 8, heads: 2, ropeBase: 500, ropeScaling: { type: "linear", factor: 3 } }, biases: [], modes: [{}] },
];

describe("TransformerBlock against a float64 composition of the reference math", () => {
  for (const { config, biases, modes } of configs) {
    for (const mode of modes) {
      it(`${JSON.stringify(config)}, ${JSON.stringify(mode)}: forward and finite-difference gradients on one device`, async () => {
        const c = resolveBlockConfig(config);
        const names = blockWeightSpecs(c).map((s) => s.name);
        expect(names.filter((n) => n.endsWith(".b")).map((n) => n.slice(0, -2))).toEqual(biases);
        expect(names.filter((n) => n.includes("_norm."))).toEqual(config.qkNorm === true ? ["attn.q_norm.gamma", "attn.k_norm.gamma"] : []);
        if (config.headDim !== undefined) expect(c.headDim).toBe(config.headDim);
        const [batch, seq] = [1, 6];
        const random = seededRandom(42);
        const x = randomTensor([batch, seq, c.hidden], random);
        const dy = randomTensor([batch, seq, c.hidden], random);
        const weights = initBlockWeights(c, 3, { perturb: 0.2, std: 0.4 });
        const w64 = Object.fromEntries(Object.entries(weights).map(([k, t]) => [k, toFloat64(t)]));
        const x64 = toFloat64(x);
        const loss = () => dot(block64(c, w64, x64), dy);
        const fd = (t: F64, i: number, step = 1e-5) => {
          const saved = t.data[i]!;
          t.data[i] = saved + step;
          const plus = loss();
          t.data[i] = saved - step;
          const minus = loss();
          t.data[i] = saved;
          return (plus - minus) / (2 * step);
        };
        const expectedY = block64(c, w64, x64);

        // one device; the same block at P = 2 and 4 is held to this one in @ulysses/parallel
        const block = new TransformerBlock(config, { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), weights, ...mode });
        const { y, context } = await block.forward(x);
        const result = await block.backward(context, dy);
        expect(maxRelativeError(y, expectedY)).toBeLessThanOrEqual(1e-5);
        const checks: [string, Tensor<"float32">, F64][] = [["x", result.dx, x64]];
        for (const spec of blockWeightSpecs(c)) checks.push([spec.name, result.grads[spec.name]!, w64[spec.name]!]);
        for (const [name, analytic, param] of checks) {
          const scale = Math.max(...Array.from(analytic.data, Math.abs));
          expect(scale, `${name} has a gradient`).toBeGreaterThan(1e-4);
          for (const i of [0, Math.floor(param.size / 2), param.size - 1]) {
            expect(Math.abs(fd(param, i) - analytic.data[i]!), `d loss / d ${name}[${i}]`).toBeLessThanOrEqual(1e-4 * scale + 1e-7);
          }
        }
      });
    }
  }
});
