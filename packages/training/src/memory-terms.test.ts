import type { GptConfig } from "@ulysses/model";
import { describe, expect, it } from "vitest";
import { estimateTrainingMemory, type TrainingMemoryInput } from "./memory-account.js";
import { adamwMomentBytes, rankStateFloats } from "./memory-terms.js";

describe("adamwMomentBytes", () => {
  it("two fp32 moments per parameter on every rank, or one pair sharded over the ranks (a checkpoint gathers nothing)", () => {
    expect(adamwMomentBytes(100, 4, false)).toBe(4 * 2 * 4 * 100);
    expect(adamwMomentBytes(100, 4, true)).toBe(2 * 4 * 100);
    expect(adamwMomentBytes(100, 1, true)).toBe(2 * 4 * 100);
  });
});

describe("rankStateFloats: the fp32 state a rank holds at each ZeRO stage", () => {
  // 10 parameters, 3 outside the blocks, 4 ranks: slices of 3, 3, 2, 2
  // ZeRO-3 gathers: layers of 2 parameters (3 layers), a final norm of 1, a head of 2
  const gathered = { layer: 2, layers: 3, finalNorm: 1, head: 2 };
  const at = (zero: number, rank: number, groupSize = 4) => rankStateFloats({ parameters: 10, edgeParameters: 3, groupSize, rank, zero, gathered });
  const none = { gatheredWeights: 0, lossPhaseWeights: 0 };
  it("stage 0: everything on every rank", () => {
    expect(at(0, 3)).toEqual({ weights: 10, ...none, gradients: 10, lossPhaseGradients: 0, moments: 20 });
  });
  it("stage 1: the moments of the rank's slice only", () => {
    expect([0, 1, 2, 3].map((rank) => at(1, rank).moments)).toEqual([6, 6, 4, 4]);
    expect(at(1, 2)).toEqual({ weights: 10, ...none, gradients: 10, lossPhaseGradients: 0, moments: 4 });
  });
  it("stage 2: the gradients of the rank's slice, and those outside the blocks through the loss only; alone, everything", () => {
    expect([0, 1, 2, 3].map((rank) => at(2, rank).gradients)).toEqual([3, 3, 2, 2]);
    expect([0, 1, 2, 3].map((rank) => at(2, rank).lossPhaseGradients)).toEqual([3, 3, 3, 3]);
    expect(at(2, 0, 1)).toEqual({ weights: 10, ...none, gradients: 10, lossPhaseGradients: 0, moments: 20 });
  });
  it("stage 3: the slice of the weights, two gathered layers and the final norm through the step, the head through the loss; alone, everything", () => {
    expect([0, 1, 2, 3].map((rank) => at(3, rank).weights)).toEqual([3, 3, 2, 2]);
    expect(at(3, 2)).toEqual({ weights: 2, gatheredWeights: 2 * 2 + 1, lossPhaseWeights: 2, gradients: 2, lossPhaseGradients: 3, moments: 4 });
    expect(at(3, 0, 1)).toEqual({ weights: 10, ...none, gradients: 10, lossPhaseGradients: 0, moments: 20 });
    // one layer: one staging buffer
    expect(rankStateFloats({ parameters: 10, edgeParameters: 3, groupSize: 2, rank: 0, zero: 3, gathered: { ...gathered, layers: 1 } }).gatheredWeights).toBe(
      3,
    );
    expect(() => rankStateFloats({ parameters: 10, edgeParameters: 3, groupSize: 2, rank: 0, zero: 3 })).toThrow(/needs what it gathers/);
  });
});

describe("the memory account's model state per ZeRO stage and with shared weights", () => {
  // hand-counted: embedding 10 x 4 = 40 (tied head), one block 144, final LayerNorm 8: 192 parameters, 48 outside the blocks
  const model: GptConfig = { vocab: 10, hidden: 4, heads: 2, kvHeads: 2, layers: 1, mlp: "gelu", mlpRatio: 2, maxSeq: 8, tiedHead: true };
  const input: TrainingMemoryInput = {
    model,
    scheme: "ulysses",
    sp: 2,
    dp: 1,
    ulyssesDegree: 2,
    ringDegree: 1,
    pipelineChunks: 1,
    tiles: { mlp: 0, loss: 0, attentionHeadGroups: 1 },
    tokensPerRank: 4,
    activationCheckpointing: false,
    zero: 0,
    sharedWeights: false,
    memoryArena: false,
    nativeOps: false,
    placement: { ranks: 2, processes: 1, workers: 2 },
  };
  const term = (overrides: Partial<TrainingMemoryInput>, name: string) => {
    const found = estimateTrainingMemory({ ...input, ...overrides }).terms.filter((t) => t.name.startsWith(name));
    expect(found, name).toHaveLength(1);
    return found[0]!.bytes;
  };
  it("weights: a replica per rank, or one per process when shared", () => {
    expect(term({}, "weights")).toBe(2 * 4 * 192);
    expect(term({ zero: 1, sharedWeights: true }, "weights")).toBe(4 * 192);
    expect(term({ zero: 1, sharedWeights: true, placement: { ranks: 4, processes: 2, workers: 0 }, sp: 4 }, "weights")).toBe(2 * 4 * 192);
  });
  it("gradients: the flat vector and one layer's per rank; under ZeRO-2 the rank's slice of 96, one layer's and the 4 MiB exchange scratch", () => {
    expect(term({}, "gradients")).toBe(2 * 4 * (192 + 144));
    expect(term({ zero: 1 }, "gradients")).toBe(2 * 4 * (192 + 144));
    expect(term({ zero: 2 }, "gradients")).toBe(2 * (4 * (96 + 144) + 4 * 2 ** 20));
    // the slices in bf16: 2 bytes each; one layer's gradient and the scratch stay float32
    expect(term({ zero: 2, sliceGradientBytes: 2 }, "gradients")).toBe(2 * (2 * 96 + 4 * 144 + 4 * 2 ** 20));
    expect(term({ zero: 1, sliceGradientBytes: 2 }, "gradients")).toBe(2 * 4 * (192 + 144));
  });
  it("the loss phase: under ZeRO-2 with the 48 gradients outside the blocks per rank", () => {
    // untiled, 4 tokens per rank: logits, softmax and their gradient (3 x vocab 10) and the final norm's 3 x hidden 4 + 2 statistics per token
    const lossPhase = 4 * (3 * 10 + 3 * 4 + 2) * 4;
    const working = (zero: number) => term({ zero }, "backward working set");
    expect(working(1)).toBeGreaterThanOrEqual(2 * lossPhase);
    expect(working(2) - working(1)).toBe(2 * 4 * 48);
  });
  it("saved activations under checkpointing: the layers' inputs in bf16 count two bytes an element, the block in backward's four", () => {
    const model3 = { ...model, layers: 3 };
    const saved = (bfloat16Checkpoints: boolean) => term({ model: model3, activationCheckpointing: true, bfloat16Checkpoints }, "saved activations");
    // 3 layers of hidden 4, 4 tokens per rank, 2 ranks: two inputs in bf16 and one in float32 instead of three in float32
    expect(saved(false) - saved(true)).toBe(2 * 4 * (3 * 4 * 4 - (2 * 2 * 4 + 4 * 4)));
  });
  it("saved activations with head groups and a tiled MLP: each layer's input and MLP input, half in bf16 but the block in backward's", () => {
    const model3 = { ...model, layers: 3 };
    const saved = (bfloat16Checkpoints: boolean, mlp = 2) =>
      term({ model: model3, tiles: { mlp, loss: 0, attentionHeadGroups: 2 }, bfloat16Checkpoints }, "saved activations");
    // 2 ranks x 4 tokens x 3 layers x (input 4 + MLP input 4) floats of 4 bytes
    expect(saved(false)).toBe(2 * 4 * 3 * 8 * 4);
    // two layers' in bf16 and one layer's in float32
    expect(saved(true)).toBe(2 * 4 * (2 * 8 * 2 + 8 * 4));
    // an untiled MLP keeps its products: nothing is stored in bf16 (the model refuses bfloat16Checkpoints there)
    expect(saved(true, 0)).toBe(saved(false, 0));
  });
  it("saved activations with the head groups' outputs kept: heads x head dim + heads floats per token and layer, float32 also under bf16", () => {
    const model3 = { ...model, layers: 3 };
    const saved = (keepAttentionOutputs: boolean, bfloat16Checkpoints = false, activationCheckpointing = false) =>
      term(
        { model: model3, tiles: { mlp: 2, loss: 0, attentionHeadGroups: 2 }, keepAttentionOutputs, bfloat16Checkpoints, activationCheckpointing },
        "saved activations",
      );
    // 2 ranks x 4 tokens x 3 layers x (2 heads x head dim 2 + 2 log-sum-exps) floats of 4 bytes
    const kept = 2 * 4 * 3 * (4 + 2) * 4;
    expect(saved(true) - saved(false)).toBe(kept);
    expect(saved(true, true) - saved(false, true)).toBe(kept);
    // checkpointing keeps no outputs (the trainer refuses the pair; the account counts what the blocks would keep)
    expect(saved(true, false, true)).toBe(saved(false, false, true));
  });
  it("ZeRO-3: each rank's slice of the 192 weights, one gathered layer of 144 and the final norm's 8; the head's 40 in the loss phase", () => {
    expect(term({ zero: 3 }, "weights")).toBe(4 * (96 + 96 + 2 * (144 + 8)));
    expect(term({ zero: 3 }, "gradients")).toBe(term({ zero: 2 }, "gradients"));
    const working = (zero: number) => term({ zero }, "backward working set");
    expect(working(3) - working(2)).toBe(2 * 4 * 40);
    // gathered in bf16: beside each slice its bf16 copy (2 bytes each), and per rank a message's scratch (4 MiB)
    expect(term({ zero: 3, weightGatherBytes: 2 }, "weights") - term({ zero: 3 }, "weights")).toBe(2 * (96 + 96) + 2 * 4 * 2 ** 20);
    expect(term({ zero: 2, weightGatherBytes: 2 }, "weights")).toBe(term({ zero: 2 }, "weights"));
  });
  it("ZeRO-1: each rank's summed slice of 96 at the step, beside its whole gradient; none at the other stages or alone", () => {
    expect(term({ zero: 1 }, "ZeRO-1's summed gradient slice")).toBe(2 * 4 * 96);
    for (const zero of [0, 2, 3]) expect(estimateTrainingMemory({ ...input, zero }).terms.some((t) => t.name.startsWith("ZeRO-1's"))).toBe(false);
    const alone = { ...input, zero: 1, sp: 1, ulyssesDegree: 1, placement: { ranks: 1, processes: 1, workers: 1 } };
    expect(estimateTrainingMemory(alone).terms.some((t) => t.name.startsWith("ZeRO-1's"))).toBe(false);
  });
  it("moments: a pair per rank, or one pair sharded over the ranks", () => {
    expect(term({}, "AdamW moments")).toBe(2 * 2 * 4 * 192);
    expect(term({ zero: 2 }, "AdamW moments")).toBe(2 * 4 * 192);
  });
});
