import { describe, expect, it } from "vitest";
import { parameterMemory } from "./memory-terms.js";

describe("parameterMemory", () => {
  it("counts fp32 weights and the flat gradient plus one layer's (hand-counted tiny model)", () => {
    // embed 10 x 4 = 40; block: norm1 and norm2 gamma + beta 16, q k v o 4 x [4, 4] = 64, up [4, 8] + down [8, 4] = 64; final norm 8
    const m = parameterMemory({ vocab: 10, hidden: 4, heads: 2, kvHeads: 2, layers: 1, mlp: "gelu", mlpRatio: 2, maxSeq: 8, tiedHead: true });
    expect(m.parameters).toBe(192);
    expect(m.weightBytes).toBe(4 * 192);
    // one layer's: the block's 16 + 64 + 64 (not the embedding or the final norm)
    expect(m.blockParameters).toBe(144);
    expect(m.layerParameters).toBe(144);
    expect(m.gradientBytes).toBe(4 * (192 + 144));
  });
});
