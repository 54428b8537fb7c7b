/**
 * Importing the package registers FusedAttention in @ulysses/kernels as
 * "fused"; createAttention then builds one with the resolved thread count,
 * and it computes what the float64 reference does. The registration is
 * checked always; building one is skipped, with the reason in the suite's
 * name, only when the native addon is not built.
 */
import { describe, expect, it } from "vitest";
import { SessionCache, attentionImplementations, createAttention } from "@ulysses/kernels";
import { maxRelativeError, randomTensor, referenceForward64, seededRandom } from "@ulysses/kernels/testing";
import { Tensor } from "@ulysses/tensors";
import { FUSED_ATTENTION_NAME, FusedAttention, fusedAttentionStatus, registerFusedAttention } from "./index.js";

const status = fusedAttentionStatus();
const suite = status.available ? "createAttention 'fused'" : `createAttention 'fused' (skipped: ${status.reason})`;

describe("registration of 'fused'", () => {
  it("happens on import, once; registering again is harmless", () => {
    expect(FUSED_ATTENTION_NAME).toBe("fused");
    expect(attentionImplementations()).toEqual(expect.arrayContaining(["ort", "reference", "fused"]));
    registerFusedAttention();
    expect(attentionImplementations().filter((name) => name === "fused")).toHaveLength(1);
  });
});

describe.skipIf(!status.available)(suite, () => {
  it("returns a FusedAttention with the cache's threads, which matches the float64 reference", async () => {
    const cache = new SessionCache({ intraOpThreads: 2 });
    const attention = await createAttention({ implementation: "fused", cache });
    try {
      expect(attention).toBeInstanceOf(FusedAttention);
      expect(attention.name).toBe("fused");
      expect((attention as FusedAttention).threads).toBe(2);
      const random = seededRandom(3);
      const q = randomTensor([1, 20, 2, 8], random);
      const k = randomTensor([1, 20, 1, 8], random);
      const { out } = await attention.forward(q, k, k, { causal: true });
      const dims = { batch: 1, seqQ: 20, seqK: 20, heads: 2, kvHeads: 1, headDim: 8, group: 2, scale: 1 / Math.sqrt(8), causal: true, offset: 0 };
      const expected = referenceForward64(Float64Array.from(q.data), Float64Array.from(k.data), Float64Array.from(k.data), dims).out;
      expect(maxRelativeError(out, new Tensor("float64", q.shape, expected))).toBeLessThanOrEqual(1e-5);
    } finally {
      await attention.release();
      await attention.release();
      await cache.release();
    }
  });

  it("tells the cache's garbage collector the bytes of its outputs", async () => {
    // out [1, 20, 2, 8] and logSumExp [1, 2, 20]: 1440 bytes a forward; dq [1, 20, 2, 8], dk and dv [1, 20, 1, 8]: 2560 a backward
    const cache = new SessionCache({ intraOpThreads: 1, collectGarbageEvery: 1440 });
    const attention = await createAttention({ implementation: "fused", cache });
    try {
      const random = seededRandom(4);
      const q = randomTensor([1, 20, 2, 8], random);
      const k = randomTensor([1, 20, 1, 8], random);
      const { out, logSumExp } = await attention.forward(q, k, k, { causal: true });
      expect(cache.collector!.collections).toBe(1);
      await attention.backward(q, k, k, out, randomTensor([1, 20, 2, 8], random), logSumExp, { causal: true });
      expect(cache.collector!.collections).toBe(2);
    } finally {
      await attention.release();
      await cache.release();
    }
  });

  it("takes the threads asked for when no cache is given", async () => {
    const attention = (await createAttention({ implementation: "fused", threads: 3 })) as FusedAttention;
    expect(attention.threads).toBe(3);
    attention.release();
  });
});
