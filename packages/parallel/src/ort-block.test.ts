import { blockWeightSpecs, initBlockWeights, resolveBlockConfig } from "@ulysses/block";
/**
 * The block with ONNX Runtime kernels (OrtAttention, createOrtOps) on 2 and 4
 * local ranks against the reference kernels on one rank.
 */
import { createOrtOps, OrtAttention, ReferenceAttention, ReferenceOps, SessionCache } from "@ulysses/kernels";
import { maxRelativeError, randomTensor, seededRandom } from "@ulysses/kernels/testing";
import type { BlockOps, LocalAttention } from "@ulysses/kernels";
import { evenSplitSizes, type Tensor } from "@ulysses/tensors";
import { afterAll, describe, expect, it } from "vitest";
import { joinShards, runRanks, shardOf, spBlock, type SpBlockConfig } from "./testing-fixtures/test-support.js";

const cache = new SessionCache({ intraOpThreads: 1 });
afterAll(() => cache.release());

async function run(config: SpBlockConfig, p: number, x: Tensor<"float32">, dy: Tensor<"float32">, ops: BlockOps, attention: LocalAttention) {
  const seq = x.shape[1]!;
  const sizes = evenSplitSizes(seq, p);
  const weights = initBlockWeights(resolveBlockConfig(config), 5, { perturb: 0.2, std: 0.3 });
  const perRank = await runRanks(p, async (group, rank) => {
    const block = spBlock(config, group, { ops, localAttention: attention, weights });
    const { y, context } = await block.forward(shardOf(x, sizes, rank), { seqLength: seq });
    return { y, ...(await block.backward(context, shardOf(dy, sizes, rank))) };
  });
  return { y: joinShards(perRank.map((r) => r.y)), dx: joinShards(perRank.map((r) => r.dx)), grads: perRank[0]!.grads };
}

describe("TransformerBlock with ONNX Runtime kernels", () => {
  const cases: [string, SpBlockConfig, number][] = [
    ["ulysses, GQA kv=2, SwiGLU, RMSNorm", { hidden: 64, heads: 8, kvHeads: 2, mlp: "swiglu", norm: "rmsnorm", mlpRatio: 2 }, 4],
    ["ulysses, uneven heads 6 on 4, N=50", { hidden: 48, heads: 6, mlpRatio: 2 }, 4],
    [
      "ulysses, Qwen3-shaped: head width 12 on hidden 32 with 4 heads, GQA kv=2, q/k norms, q/k/v biases",
      { hidden: 32, heads: 4, kvHeads: 2, headDim: 12, qkNorm: true, attentionBias: "qkv", mlp: "swiglu", norm: "rmsnorm", mlpRatio: 2 },
      2,
    ],
    ["allgather, MHA", { hidden: 32, heads: 4, attention: "allgather", mlpRatio: 2 }, 2],
    ["ring, GQA kv=2 (OrtAttention's backward reads the merged lse and out)", { hidden: 32, heads: 4, kvHeads: 2, attention: "ring", mlpRatio: 2 }, 4],
  ];
  for (const [name, config, p] of cases) {
    it(`${name}: P=${p} with ORT kernels equals P=1 with the reference kernels`, async () => {
      const seq = name.includes("N=50") ? 50 : 64;
      const random = seededRandom(seq + p);
      const x = randomTensor([1, seq, config.hidden], random);
      const dy = randomTensor([1, seq, config.hidden], random);
      const expected = await run(config, 1, x, dy, new ReferenceOps(), new ReferenceAttention());
      const got = await run(config, p, x, dy, createOrtOps(cache), new OrtAttention({ cache, blockRows: 16 }));
      expect(maxRelativeError(got.y, expected.y)).toBeLessThanOrEqual(1e-5);
      expect(maxRelativeError(got.dx, expected.dx)).toBeLessThanOrEqual(1e-5);
      for (const spec of blockWeightSpecs(resolveBlockConfig(config))) {
        expect(maxRelativeError(got.grads[spec.name]!, expected.grads[spec.name]!), spec.name).toBeLessThanOrEqual(1e-5);
      }
    });
  }
});
