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

  it("builds 'custom' from the module the caller's loader returns, with the thread count", async () => {
    const made: { threads?: number }[] = [];
    class FusedAttention {
      readonly name = "fake-fused";
      constructor(options: { threads?: number }) {
        made.push(options);
      }
      forward(): never {
        throw new Error("not called");
      }
      backward(): never {
        throw new Error("not called");
      }
    }
    const attention = await createAttention({ implementation: "custom", threads: 3, load: async () => ({ FusedAttention }) });
    expect(attention.name).toBe("fake-fused");
    expect(made).toEqual([{ threads: 3 }]);
  });

  it("says how to build and wire @ulysses/fused-attention when it cannot be loaded", async () => {
    const error = await createAttention({ implementation: "custom", threads: 1, load: () => Promise.reject(new Error("Cannot find package")) }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(KernelError);
    expect((error as Error).message).toMatch(/@ulysses\/fused-attention.*Cannot find package.*build:native.*load: \(\) => import/s);
  });

  it("asks for the loader when 'custom' is chosen without one", async () => {
    await expect(createAttention({ implementation: "custom", threads: 1 })).rejects.toThrow(/needs `load: \(\) => import\("@ulysses\/fused-attention"\)`/);
  });

  it("names the exports when the loaded module has no FusedAttention", async () => {
    await expect(createAttention({ implementation: "custom", load: async () => ({ Other: 1 }) })).rejects.toThrow(/exports no FusedAttention class \(exports: Other\)/);
  });

  it("rejects unknown implementations by name", async () => {
    await expect(createAttention({ implementation: "flash" as AttentionImplementation })).rejects.toThrow(/unknown attention implementation 'flash'/);
  });
});
