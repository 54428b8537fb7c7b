import { BlockError, blockWeightSpecs, initBlockWeights, resolveBlockConfig, type TransformerBlockOptions } from "@ulysses/block";
import { ReferenceAttention, ReferenceOps, StatsReferenceAttention } from "@ulysses/kernels";
import { maxRelativeError, randomTensor, seededRandom } from "@ulysses/kernels/testing";
import { evenSplitSizes, type Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { ParallelError } from "./errors.js";
import { ringBackwardBytes, ringForwardBytes } from "./ring-attention.js";
import { joinShards, runRanks, shardOf, spBlock, type SpBlockConfig } from "./testing-fixtures/test-support.js";

type F32 = Tensor<"float32">;

const ops = new ReferenceOps();
const attention = new ReferenceAttention();
// ring's blocks need a backward that reads the merged lse and out (ring-attention.ts refuses ReferenceAttention for P > 1)
const ringKernel = new StatsReferenceAttention();
const kernelFor = (config: SpBlockConfig, p: number) => (config.attention === "ring" && p > 1 ? ringKernel : attention);

interface RunOptions {
  checkpoint?: boolean;
  reduceGradients?: boolean;
  /** More of the block's options (head groups, kept outputs). */
  block?: Partial<TransformerBlockOptions>;
}

/** Runs one block forward + backward on `p` ranks over the full [b, N, hidden] input; joins the shards. */
async function runBlock(config: SpBlockConfig, p: number, x: F32, dy: F32, options: RunOptions = {}) {
  const seq = x.shape[1]!;
  const sizes = evenSplitSizes(seq, p);
  const weights = initBlockWeights(resolveBlockConfig(config), 11, { perturb: 0.2, std: 0.3 });
  const perRank = await runRanks(p, async (group, rank) => {
    const block = spBlock(config, group, { ops, localAttention: kernelFor(config, p), weights, checkpoint: options.checkpoint ?? false, ...options.block });
    const { y, context } = await block.forward(shardOf(x, sizes, rank), { seqLength: seq });
    const forwardStats = group.stats();
    const savedBytes = context.block.savedBytes;
    const g = await block.backward(context, shardOf(dy, sizes, rank), { reduceGradients: options.reduceGradients ?? true });
    return { y, dx: g.dx, grads: g.grads, savedBytes, forwardStats, stats: group.stats() };
  });
  return { y: joinShards(perRank.map((r) => r.y)), dx: joinShards(perRank.map((r) => r.dx)), perRank };
}

function data(config: SpBlockConfig, batch: number, seq: number, seed: number) {
  const random = seededRandom(seed);
  return { x: randomTensor([batch, seq, config.hidden], random), dy: randomTensor([batch, seq, config.hidden], random) };
}

interface Case {
  name: string;
  config: SpBlockConfig;
  batch: number;
  seq: number;
  ranks: number[];
}

/** The RoPE-scaling cases' block: GQA, RMSNorm, SwiGLU, head dim 8. */
const scaledBlock = { hidden: 32, heads: 4, kvHeads: 2, norm: "rmsnorm", mlp: "swiglu", mlpRatio: 2 } as const;

const cases: Case[] = [
  { name: "MHA, LayerNorm, GELU, causal", config: { hidden: 16, heads: 4 }, batch: 2, seq: 12, ranks: [2, 3, 4] },
  { name: "MHA with biases, non-causal", config: { hidden: 16, heads: 4, bias: true, causal: false, mlpRatio: 2 }, batch: 1, seq: 8, ranks: [2, 4] },
  {
    name: "GQA kv=2, RMSNorm, SwiGLU",
    config: { hidden: 32, heads: 8, kvHeads: 2, norm: "rmsnorm", mlp: "swiglu", mlpRatio: 2 },
    batch: 1,
    seq: 8,
    ranks: [2, 4],
  },
  {
    name: "GQA, RMSNorm, SwiGLU, llama3 RoPE scaling (head dim 8: pairs kept, interpolated and divided)",
    config: {
      ...scaledBlock,
      ropeScaling: { type: "llama3", factor: 4, lowFreqFactor: 1, highFreqFactor: 8, originalMaxPositions: 64 },
    },
    batch: 1,
    seq: 24,
    ranks: [2, 3],
  },
  {
    name: "GQA, RMSNorm, SwiGLU, yarn RoPE scaling (head dim 8 over a context of 64: one pair kept, one ramped, two divided; cos and sin times 1.2)",
    config: {
      ...scaledBlock,
      ropeScaling: { type: "yarn", factor: 4, originalMaxPositions: 64, betaFast: 32, betaSlow: 1, attentionFactor: 1.2, truncate: true },
    },
    batch: 1,
    seq: 24,
    ranks: [2],
  },
  {
    name: "Qwen3-shaped: head width 6 on hidden 16 with 4 heads, GQA kv=2, q/k norms, q/k/v biases",
    config: { hidden: 16, heads: 4, kvHeads: 2, headDim: 6, qkNorm: true, attentionBias: "qkv", norm: "rmsnorm", mlp: "swiglu", mlpRatio: 2 },
    batch: 1,
    seq: 8,
    ranks: [2, 4],
  },
  { name: "uneven heads 6 on 4", config: { hidden: 24, heads: 6, mlpRatio: 2 }, batch: 1, seq: 8, ranks: [4] },
  { name: "uneven sequence N=1000 on 3", config: { hidden: 12, heads: 3, mlpRatio: 2, norm: "rmsnorm" }, batch: 1, seq: 1000, ranks: [3] },
];

describe.each(["ulysses", "allgather", "ring"] as const)("TransformerBlock (%s) equals the single-rank run", (kind) => {
  for (const c of cases) {
    it(`${c.name} (P = ${c.ranks.join(", ")})`, async () => {
      const config = { ...c.config, attention: kind };
      const { x, dy } = data(config, c.batch, c.seq, c.seq + c.config.hidden);
      const single = await runBlock(config, 1, x, dy);
      const names = blockWeightSpecs(resolveBlockConfig(config)).map((s) => s.name);
      for (const p of c.ranks) {
        const got = await runBlock(config, p, x, dy);
        expect(maxRelativeError(got.y, single.y), `y P=${p}`).toBeLessThanOrEqual(1e-5);
        expect(maxRelativeError(got.dx, single.dx), `dx P=${p}`).toBeLessThanOrEqual(1e-5);
        for (const r of got.perRank) {
          for (const name of names) {
            expect(maxRelativeError(r.grads[name]!, single.perRank[0]!.grads[name]!), `${name} P=${p}`).toBeLessThanOrEqual(1e-5);
          }
        }
      }
    });
  }
});

describe("TransformerBlock communication and memory", () => {
  const config: SpBlockConfig = { hidden: 32, heads: 8 };
  const [batch, seq, heads, headDim] = [1, 16, 8, 4];

  it("Ulysses: 4·(P−1)/P·(N/P)·H·D·4 bytes per rank forward, 2x with backward, 3x with checkpointing", async () => {
    const { x, dy } = data(config, batch, seq, 5);
    for (const p of [2, 4]) {
      const forwardBytes = (4 * (p - 1) * (seq / p) * heads * headDim * 4) / p;
      const plain = await runBlock(config, p, x, dy, { reduceGradients: false });
      const recompute = await runBlock(config, p, x, dy, { reduceGradients: false, checkpoint: true });
      for (const r of plain.perRank) {
        expect(r.forwardStats.total.bytesSent).toBe(forwardBytes);
        expect(r.stats.total.bytesSent).toBe(2 * forwardBytes);
      }
      for (const r of recompute.perRank) {
        expect(r.forwardStats.total.bytesSent).toBe(forwardBytes);
        expect(r.stats.total.bytesSent).toBe(3 * forwardBytes);
      }
    }
  });

  it("sums weight gradients with exactly one all-reduce over every weight", async () => {
    const { x, dy } = data(config, batch, seq, 6);
    const weightCount = blockWeightSpecs(resolveBlockConfig(config)).reduce((n, s) => n + s.shape.reduce((a, b) => a * b, 1), 0);
    const got = await runBlock(config, 4, x, dy);
    for (const r of got.perRank) {
      expect(r.stats.byOp.allReduce.calls).toBe(1);
      expect(r.stats.byOp.allReduce.elements).toBe(weightCount);
    }
  });

  it("all-gather-KV baseline: (P−1)·(N/P)·2·Hkv·D·4 bytes forward (K and V), the same again backward", async () => {
    const { x, dy } = data(config, batch, seq, 7);
    for (const p of [2, 4]) {
      const kvBytes = (p - 1) * (seq / p) * 2 * heads * headDim * 4;
      const got = await runBlock({ ...config, attention: "allgather" }, p, x, dy, { reduceGradients: false });
      for (const r of got.perRank) {
        expect(r.forwardStats.total.bytesSent).toBe(kvBytes);
        expect(r.stats.total.bytesSent).toBe(2 * kvBytes);
      }
    }
  });

  it("ring: bytes per rank equal ringForwardBytes forward and ringBackwardBytes more backward (causal, N = 10 on 4 too)", async () => {
    for (const [p, length] of [
      [2, seq],
      [4, seq],
      [4, 10],
    ] as const) {
      const { x, dy } = data(config, batch, length, 12);
      const sizes = evenSplitSizes(length, p);
      const tokenBytes = 2 * batch * heads * headDim * 4;
      const got = await runBlock({ ...config, attention: "ring" }, p, x, dy, { reduceGradients: false });
      got.perRank.forEach((r, rank) => {
        expect(r.forwardStats.total.bytesSent, `P=${p} N=${length} rank ${rank}`).toBe(ringForwardBytes(sizes, rank, true, tokenBytes));
        expect(r.stats.total.bytesSent - r.forwardStats.total.bytesSent).toBe(ringBackwardBytes(sizes, rank, true, tokenBytes));
        expect(r.stats.byOp.allToAll.calls + r.stats.byOp.allGather.calls).toBe(0);
      });
    }
  });

  it("activation checkpointing gives identical results and saves only the input", async () => {
    const { x, dy } = data(config, 2, seq, 8);
    const p = 2;
    const plain = await runBlock(config, p, x, dy);
    const recompute = await runBlock(config, p, x, dy, { checkpoint: true });
    expect(Array.from(recompute.y.data)).toEqual(Array.from(plain.y.data));
    expect(Array.from(recompute.dx.data)).toEqual(Array.from(plain.dx.data));
    const rows = 2 * (seq / p);
    const hidden = config.hidden;
    const mlp = 4 * hidden;
    // Saved without checkpointing: x, h1, x2, h2 [rows, hidden]; attention output [rows, H*D];
    // up and act [rows, mlp]; two LayerNorms' mean and rstd [rows]; Ulysses' q, k, v, out
    // [b, N, H/P, D] (= rows*H*D each) and log-sum-exp [b, H/P, N] (= rows*H).
    const floats = 4 * rows * hidden + rows * heads * headDim + 2 * rows * mlp + 4 * rows + 4 * rows * heads * headDim + rows * heads;
    for (let r = 0; r < p; r++) {
      expect(recompute.perRank[r]!.savedBytes).toBe(rows * hidden * 4);
      expect(plain.perRank[r]!.savedBytes).toBe(floats * 4);
      expect(Array.from(recompute.perRank[r]!.grads["attn.q.w"]!.data)).toEqual(Array.from(plain.perRank[r]!.grads["attn.q.w"]!.data));
    }
  });
});

describe("Ulysses with head groups whose outputs are kept (keepAttentionOutputs)", () => {
  const config: SpBlockConfig = { hidden: 32, heads: 8, kvHeads: 2, norm: "rmsnorm", mlp: "swiglu", mlpRatio: 2, qkNorm: true };
  const names = blockWeightSpecs(resolveBlockConfig(config)).map((s) => s.name);
  for (const p of [2, 4]) {
    it(`P = ${p}: the recompute's bits, the single rank's values, the outputs and log-sum-exp more per rank`, async () => {
      const seq = 16;
      const { x, dy } = data(config, 1, seq, 21);
      const single = await runBlock(config, 1, x, dy);
      const recomputed = await runBlock(config, p, x, dy, { block: { attentionHeadGroups: 2, mlpTileRows: 3 } });
      const kept = await runBlock(config, p, x, dy, { block: { attentionHeadGroups: 2, mlpTileRows: 3, keepAttentionOutputs: true } });
      expect(Array.from(kept.y.data)).toEqual(Array.from(recomputed.y.data));
      expect(Array.from(kept.dx.data)).toEqual(Array.from(recomputed.dx.data));
      expect(maxRelativeError(kept.dx, single.dx)).toBeLessThanOrEqual(1e-5);
      const rows = seq / p;
      for (let r = 0; r < p; r++) {
        for (const name of names) {
          expect(Array.from(kept.perRank[r]!.grads[name]!.data), `${name} rank ${r}`).toEqual(Array.from(recomputed.perRank[r]!.grads[name]!.data));
          expect(maxRelativeError(kept.perRank[r]!.grads[name]!, single.perRank[0]!.grads[name]!), `${name} rank ${r}`).toBeLessThanOrEqual(1e-5);
        }
        // each group's output [1, N/P, H/2, D] and its log-sum-exp [1, H/2/P, N] (both groups: rows x H floats)
        expect(kept.perRank[r]!.savedBytes - recomputed.perRank[r]!.savedBytes).toBe(4 * (rows * 8 * 4 + rows * 8));
      }
    });
  }
});

describe("TransformerBlock buffer reuse", () => {
  it.each(["ulysses", "allgather", "ring"] as const)("%s: two blocks sharing one wrapper over repeated steps equal fresh single-step runs", async (kind) => {
    const config: SpBlockConfig = { hidden: 16, heads: 4, kvHeads: 2, attention: kind, mlpRatio: 2 };
    const resolved = resolveBlockConfig(config);
    const w1 = initBlockWeights(resolved, 1, { perturb: 0.2, std: 0.3 });
    const w2 = initBlockWeights(resolved, 2, { perturb: 0.2, std: 0.3 });
    const [p, seq] = [2, 10];
    const sizes = evenSplitSizes(seq, p);
    const steps = [data(config, 1, seq, 21), data(config, 1, seq, 22), data(config, 1, seq, 23)];
    /** y of block 2 after block 1, and dx of block 1, for one step, on fresh blocks and wrappers. */
    const fresh = async (step: (typeof steps)[number]) =>
      runRanks(p, async (group, rank) => {
        const b1 = spBlock(config, group, { ops, localAttention: kernelFor(config, p), weights: w1 });
        const b2 = spBlock(config, group, { ops, localAttention: kernelFor(config, p), weights: w2 });
        const f1 = await b1.forward(shardOf(step.x, sizes, rank));
        const f2 = await b2.forward(f1.y);
        const g2 = await b2.backward(f2.context, shardOf(step.dy, sizes, rank));
        const g1 = await b1.backward(f1.context, g2.dx);
        return { y: f2.y, dx: g1.dx, grads: g1.flat };
      });
    const reused = await runRanks(p, async (group, rank) => {
      const b1 = spBlock(config, group, { ops, localAttention: kernelFor(config, p), weights: w1 });
      const b2 = spBlock(config, group, { ops, localAttention: kernelFor(config, p), weights: w2, checkpoint: true }, b1.attention);
      const out = [];
      for (const step of steps) {
        const f1 = await b1.forward(shardOf(step.x, sizes, rank));
        const f2 = await b2.forward(f1.y);
        const g2 = await b2.backward(f2.context, shardOf(step.dy, sizes, rank));
        const g1 = await b1.backward(f1.context, g2.dx);
        out.push({ y: f2.y, dx: g1.dx, grads: g1.flat });
        await expect(b1.backward(f1.context, g2.dx)).rejects.toThrow(BlockError);
        // An evaluation forward whose context is released, not back-propagated.
        const evaluation = (await b1.forward(shardOf(step.dy, sizes, rank))).context;
        b1.release(evaluation);
        await expect(b1.backward(evaluation, g2.dx)).rejects.toThrow(/context was released/);
      }
      return out;
    });
    for (let i = 0; i < steps.length; i++) {
      const expected = await fresh(steps[i]!);
      for (let r = 0; r < p; r++) {
        expect(Array.from(reused[r]![i]!.y.data)).toEqual(Array.from(expected[r]!.y.data));
        expect(Array.from(reused[r]![i]!.dx.data)).toEqual(Array.from(expected[r]!.dx.data));
        expect(Array.from(reused[r]![i]!.grads)).toEqual(Array.from(expected[r]!.grads));
      }
    }
  });
});

describe("TransformerBlock configuration errors", () => {
  it("rejects impossible configurations before any communication", async () => {
    await runRanks(4, async (group) => {
      const make = (config: SpBlockConfig) => () => spBlock(config, group, { ops, localAttention: attention });
      expect(make({ hidden: 12, heads: 3 })).toThrow(/3 heads cannot be split over 4 ranks/);
      expect(make({ hidden: 12, heads: 3 })).toThrow(ParallelError);
      expect(make({ hidden: 24, heads: 6, kvHeads: 4 })).toThrow(/heads \(6\) must be a multiple of kvHeads \(4\)/);
      expect(make({ hidden: 20, heads: 6 })).toThrow(/hidden \(20\) must be divisible by heads \(6\)/);
      expect(make({ hidden: 12, heads: 4 })).toThrow(/headDim = hidden\/heads = 12\/4 = 3 must be even/);
      expect(make({ hidden: 12, heads: 3, attention: "allgather" })).not.toThrow();
      expect(() => spBlock({ hidden: 12, heads: 3, attention: "ring" }, group, { ops, localAttention: ringKernel })).not.toThrow();
      expect(make({ hidden: 12, heads: 3, attention: "ring" })).toThrow(/ReferenceAttention's backward recomputes the probabilities/);
      expect(group.stats().total.calls).toBe(0);
    });
  });
});
