import { describe, expect, it } from "vitest";
import { KernelError } from "../errors.js";
import { ReferenceAttention } from "../reference/attention.js";
import { SessionCache } from "../runtime/session-cache.js";
import { OrtAttention } from "./ort-attention.js";
import { createAttention, type AttentionImplementation } from "./select.js";

describe("createAttention", () => {
  it("builds the ort (default) and reference implementations", async () => {
    const cache = new SessionCache({ intraOpThreads: 1 });
    const ort = await createAttention({ cache, blockRows: 64 });
    expect(ort).toBeInstanceOf(OrtAttention);
    expect((ort as OrtAttention).cache).toBe(cache);
    expect((ort as OrtAttention).blockRows).toBe(64);
    expect(await createAttention({ implementation: "reference" })).toBeInstanceOf(ReferenceAttention);
  });

  it("loads the fused package for 'custom', or says how to build it", async () => {
    let attention;
    try {
      attention = await createAttention({ implementation: "custom", threads: 1 });
    } catch (error) {
      expect(error).toBeInstanceOf(KernelError);
      expect((error as Error).message).toMatch(/@ulysses\/fused-attention.*build:native.*dependency/s);
      return;
    }
    expect(typeof attention.forward).toBe("function");
    expect(typeof attention.backward).toBe("function");
  });

  it("rejects unknown implementations by name", async () => {
    await expect(createAttention({ implementation: "flash" as AttentionImplementation })).rejects.toThrow(/unknown attention implementation 'flash'/);
  });
});
