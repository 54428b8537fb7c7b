import { describe, expect, it } from "vitest";
import { KernelError } from "../errors.js";
import { GarbageCollector } from "./garbage-collector.js";

describe("GarbageCollector", () => {
  it("collects once every `everyBytes` allocated, freeing what nothing references", async () => {
    const collector = new GarbageCollector(1000);
    let holder: { data: Float32Array } | null = { data: new Float32Array(1 << 16) };
    const ref = new WeakRef(holder);
    holder = null;
    // a WeakRef keeps its target alive until the current job ends (deref() too, so it is read only after the collection)
    await new Promise((resolve) => setTimeout(resolve, 0));
    collector.allocated(600);
    expect(collector.collections).toBe(0);
    collector.allocated(600);
    expect(collector.collections).toBe(1);
    expect(ref.deref()).toBeUndefined();
    collector.allocated(999);
    expect(collector.collections).toBe(1);
    collector.allocated(1);
    expect(collector.collections).toBe(2);
    expect(collector.milliseconds).toBeGreaterThan(0);
  });

  it("names a bad byte count", () => {
    for (const bad of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => new GarbageCollector(bad)).toThrow(KernelError);
      expect(() => new GarbageCollector(bad)).toThrow(`collectGarbageEvery must be a positive number of bytes, got ${bad}`);
    }
  });
});
