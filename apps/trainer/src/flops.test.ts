import { gptMatrixWeights } from "@ulysses/measure";
import { gptParamSpecs, type GptConfig } from "@ulysses/model";
import { describe, expect, it } from "vitest";
import { gptDimensionsOf, modelFlopsPerStep } from "./flops.js";

// 1 layer, hidden 4, mlp ratio 1, vocab 8, untied: matrices q, k, v, o (4x4 each), up, down (4x4), head 4x8
const config: GptConfig = { vocab: 8, hidden: 4, heads: 2, kvHeads: 2, layers: 1, mlp: "gelu", mlpRatio: 1, maxSeq: 16, tiedHead: false };

/** Weights of the model's own matrices: every 2-D parameter but the embedding table, plus the tied head (the same table, used as a product). */
function matrixWeightsOfSpecs(c: GptConfig): number {
  let weights = c.tiedHead ? c.hidden * c.vocab : 0;
  for (const spec of gptParamSpecs(c)) if (spec.shape.length === 2 && spec.name !== "embed.weight") weights += spec.shape[0]! * spec.shape[1]!;
  return weights;
}

describe("model FLOPs", () => {
  it("counts 6 FLOPs per matrix weight per token plus 3 x 4·h per causal pair", () => {
    const weights = 6 * 16 + 32;
    // 10 tokens of sequences of 5: 2 sequences of 5·6/2 = 15 causal pairs each
    expect(modelFlopsPerStep(config, 10, 5)).toBe(10 * 6 * weights + 2 * 3 * 4 * 4 * 15);
    expect(modelFlopsPerStep({ ...config, tiedHead: true }, 10, 5)).toBe(10 * 6 * weights + 2 * 3 * 4 * 4 * 15);
  });

  it("the dimensions give the matrices the model really has", () => {
    const configs: GptConfig[] = [
      config,
      { ...config, tiedHead: true },
      { ...config, layers: 3, hidden: 16, heads: 4, kvHeads: 2, mlp: "swiglu", mlpRatio: 2.5, vocab: 11 },
      { ...config, layers: 2, hidden: 12, heads: 6, kvHeads: 1, mlpRatio: 4, norm: "rmsnorm" },
    ];
    for (const c of configs) expect(gptMatrixWeights(gptDimensionsOf(c))).toBe(matrixWeightsOfSpecs(c));
  });
});

describe("the MFU's MatMul rate", () => {
  it("is measured on the addon's path when the addon loads (ONNX Runtime's kernel, each output reused), else through onnxruntime-node", async () => {
    const { matmulRateCache } = await import("./kernels.js");
    const { fusedAttentionStatus, NativeSessionCache } = await import("@ulysses/native-ops");
    const { measureMatmulRate } = await import("@ulysses/measure");
    const chosen = matmulRateCache();
    if (!fusedAttentionStatus().available) {
      expect(chosen.cache).toBeUndefined();
      expect(chosen.path).toMatch(/through onnxruntime-node/);
      return;
    }
    expect(chosen.path).toBe("on the addon's path");
    let made: InstanceType<typeof NativeSessionCache> | undefined;
    const rate = await measureMatmulRate({
      threads: 1,
      size: 32,
      rounds: 2,
      repeats: 2,
      minRoundMs: 0,
      cache: (settings) => {
        const given = chosen.cache!(settings);
        made = given.cache as InstanceType<typeof NativeSessionCache>;
        return given;
      },
    });
    expect(rate).toBeGreaterThan(0);
    expect(made).toBeInstanceOf(NativeSessionCache);
    // 6 runs: the first through onnxruntime-node (it plans the graph), the other 5 natively, each after the first of them on the output the run before gave back
    expect(made!.nativeRuns).toBe(5);
    expect(made!.outputs.reused).toBe(4);
  });
});
