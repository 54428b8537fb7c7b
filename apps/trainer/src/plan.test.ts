import { describe, expect, it } from "vitest";
import { DEFAULTS, type TrainConfig } from "./config.js";
import { keepsBfloat16, planRun } from "./plan.js";

// the default model at SP 2, its MLP in tiles of 512 tokens
const base: TrainConfig = { ...DEFAULTS, seq: 4096, batch: 1, tileMlp: 512 };
const keeps = (overrides: Partial<TrainConfig>) => {
  const config = { ...base, ...overrides };
  return keepsBfloat16(config, planRun(config));
};

describe("keepsBfloat16: what the blocks keep goes to bf16 only where it is all they keep", () => {
  it("with checkpointing, or with head groups and a tiled MLP, under --precision bf16", () => {
    // the default model's 4 heads at SP 2: 2 head groups
    expect(planRun({ ...base, tileAttention: "auto" }).tiles).toMatchObject({ mlp: 512, attentionHeadGroups: 2 });
    expect(keeps({ precision: "bf16", zero: 2, activationCheckpointing: true })).toBe(true);
    expect(keeps({ precision: "bf16", zero: 2, tileAttention: "auto" })).toBe(true);
    expect(keeps({ precision: "bf16", zero: 2, tileAttention: 2, tileMlp: 0 })).toBe(false);
    expect(keeps({ precision: "bf16", zero: 2 })).toBe(false);
    expect(keeps({ tileAttention: "auto", activationCheckpointing: true })).toBe(false);
  });
});
