/**
 * The attention registry: the built-in "ort" and "reference", an
 * implementation registered by name (what @ulysses/native-ops does for
 * "fused", tested in that package), refusals that name the offending values,
 * and release() on the built-ins (a shared cache is left to its owner).
 */
import { describe, expect, it } from "vitest";
import { Tensor } from "@ulysses/tensors";
import { KernelError } from "../errors.js";
import { ReferenceAttention } from "../reference/attention.js";
import { SessionCache } from "../runtime/session-cache.js";
import { OrtAttention } from "./ort-attention.js";
import { attentionImplementations, createAttention, registerAttention, type AttentionFactoryOptions } from "./registry.js";
import type { LocalAttention } from "./types.js";

/** A LocalAttention that records how it was made and computes nothing. */
class RecordingAttention implements LocalAttention {
  readonly name = "recording";
  releases = 0;
  constructor(readonly made: AttentionFactoryOptions) {}
  forward(): never {
    throw new Error("RecordingAttention.forward is not called in these tests");
  }
  backward(): never {
    throw new Error("RecordingAttention.backward is not called in these tests");
  }
  release(): void {
    this.releases++;
  }
}

describe("attention registry", () => {
  it("has ort and reference built in, and builds ort (the default) on the caller's cache", async () => {
    expect(attentionImplementations()).toEqual(expect.arrayContaining(["ort", "reference"]));
    const cache = new SessionCache({ intraOpThreads: 1 });
    const ort = await createAttention({ cache, blockRows: 64 });
    expect(ort).toBeInstanceOf(OrtAttention);
    expect((ort as OrtAttention).cache).toBe(cache);
    expect((ort as OrtAttention).blockRows).toBe(64);
    expect(await createAttention({ implementation: "reference" })).toBeInstanceOf(ReferenceAttention);
  });

  it("gives ort without a cache a cache of its own with the threads asked for", async () => {
    const ort = (await createAttention({ implementation: "ort", threads: 3 })) as OrtAttention;
    expect(ort.cache.intraOpThreads).toBe(3);
    await ort.release();
  });

  it("creates a registered implementation by name, passing threads, cache and blockRows to its factory", async () => {
    registerAttention("test-recording", async (options) => new RecordingAttention(options));
    expect(attentionImplementations()).toContain("test-recording");
    const plain = (await createAttention({ implementation: "test-recording", threads: 3 })) as RecordingAttention;
    expect(plain).toBeInstanceOf(RecordingAttention);
    expect(plain.made).toEqual({ cache: undefined, threads: 3, blockRows: undefined });
    const cache = new SessionCache({ intraOpThreads: 2 });
    const shared = (await createAttention({ implementation: "test-recording", cache, blockRows: 16 })) as RecordingAttention;
    expect(shared.made.cache).toBe(cache);
    expect(shared.made).toMatchObject({ threads: 2, blockRows: 16 });
    await shared.release();
    expect(shared.releases).toBe(1);
  });

  it("refuses a second registration of a name, and bad names and factories", () => {
    const factory = () => new ReferenceAttention();
    registerAttention("test-once", factory);
    expect(() => registerAttention("test-once", factory)).toThrow(
      new KernelError("registerAttention: an attention implementation named 'test-once' is already registered"),
    );
    expect(() => registerAttention("ort", factory)).toThrow(/named 'ort' is already registered/);
    expect(() => registerAttention("", factory)).toThrow(/name must be a non-empty string, got $/);
    expect(() => registerAttention("test-bad", 5 as never)).toThrow(/registerAttention\('test-bad'\): factory must be a function, got number/);
    expect(attentionImplementations()).not.toContain("test-bad");
  });

  it("rejects an unknown name, listing the registered ones and the fused package's import", async () => {
    const error = (await createAttention({ implementation: "flash" }).catch((e: unknown) => e)) as Error;
    expect(error).toBeInstanceOf(KernelError);
    expect(error.message).toMatch(/^unknown attention implementation 'flash'; registered: ort, reference\b/);
    expect(error.message).toContain('`import "@ulysses/native-ops"`');
  });

  it("says to import @ulysses/native-ops when 'fused' is asked for before that import", async () => {
    // This package never imports the fused one, so 'fused' is not registered here.
    expect(attentionImplementations()).not.toContain("fused");
    await expect(createAttention({ implementation: "fused", threads: 1 })).rejects.toThrow(
      /attention implementation 'fused' is not registered: add @ulysses\/native-ops as a dependency and `import "@ulysses\/native-ops"`.*registered: ort, reference/,
    );
  });

  it("refuses bad or conflicting thread counts by value", async () => {
    await expect(createAttention({ threads: 0 })).rejects.toThrow(/threads must be a positive integer, got 0/);
    const cache = new SessionCache({ intraOpThreads: 2 });
    await expect(createAttention({ cache, threads: 3 })).rejects.toThrow(/threads \(3\) differs from the cache's intraOpThreads \(2\)/);
  });

  it("names the implementation when its factory fails, keeping the cause", async () => {
    const cause = new Error("addon missing");
    registerAttention("test-failing", () => {
      throw cause;
    });
    const error = (await createAttention({ implementation: "test-failing", threads: 1 }).catch((e: unknown) => e)) as KernelError;
    expect(error).toBeInstanceOf(KernelError);
    expect(error.message).toBe("attention implementation 'test-failing' could not be created: addon missing");
    expect(error.cause).toBe(cause);
  });
});

describe("release() of the built-in implementations", () => {
  const q = Tensor.from("float32", [1, 2, 1, 2], [0.1, 0.2, 0.3, 0.4]);

  it("OrtAttention leaves a cache it was given to its owner, and frees one it made; twice is harmless", async () => {
    const cache = new SessionCache({ intraOpThreads: 1 });
    const shared = new OrtAttention({ cache });
    await shared.forward(q, q, q, { causal: true });
    expect(cache.size).toBeGreaterThan(0);
    await shared.release();
    expect(cache.size).toBeGreaterThan(0);
    await cache.release();

    const owning = new OrtAttention({ threads: 1 });
    await owning.forward(q, q, q, { causal: true });
    expect(owning.cache.size).toBeGreaterThan(0);
    await owning.release();
    expect(owning.cache.size).toBe(0);
    await owning.release();
    expect(() => new OrtAttention({ cache: new SessionCache({ intraOpThreads: 1 }), threads: 2 })).toThrow(
      /threads \(2\) differs from the cache's intraOpThreads \(1\)/,
    );
  });

  it("ReferenceAttention's is a no-op and it keeps working", async () => {
    const reference = new ReferenceAttention();
    reference.release();
    reference.release();
    const { out } = await reference.forward(q, q, q, { causal: true });
    expect(out.shape).toEqual([1, 2, 1, 2]);
  });
});
