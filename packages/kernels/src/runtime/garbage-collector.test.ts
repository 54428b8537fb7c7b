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

  it("willAllocate collects before outputs that would reach the budget; announced outputs do not collect after", async () => {
    const collector = new GarbageCollector(1000);
    collector.willAllocate(2000); // nothing allocated since the last collection: nothing to collect
    expect(collector.collections).toBe(0);
    collector.allocated(2000, true);
    expect(collector.collections).toBe(0);
    // the 2000 bytes become garbage; the next op's 600 would bring the count to 2600: collected before it runs
    let garbage: { data: Float32Array } | null = { data: new Float32Array(500) };
    const ref = new WeakRef(garbage);
    garbage = null;
    await new Promise((resolve) => setTimeout(resolve, 0));
    collector.willAllocate(600);
    expect(collector.collections).toBe(1);
    expect(ref.deref()).toBeUndefined();
    collector.allocated(600, true);
    collector.willAllocate(300); // 900 < 1000
    collector.allocated(300, true);
    expect(collector.collections).toBe(1);
    collector.willAllocate(100); // 1000
    expect(collector.collections).toBe(2);
    // unannounced outputs still collect after
    collector.allocated(1000);
    expect(collector.collections).toBe(3);
  });

  it("names a bad byte count", () => {
    for (const bad of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => new GarbageCollector(bad)).toThrow(KernelError);
      expect(() => new GarbageCollector(bad)).toThrow(`collectGarbageEvery must be a positive number of bytes, got ${bad}`);
    }
  });
});
