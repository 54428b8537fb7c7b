import { Worker } from "node:worker_threads";
import { describe, expect, it } from "vitest";
import { KernelError } from "../errors.js";
import { GarbageCollector, MAX_HEAP_GROWING_PERCENT, setHeapGrowingPercent } from "./garbage-collector.js";

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

describe("setHeapGrowingPercent", () => {
  it("takes integers from 0 to MAX_HEAP_GROWING_PERCENT", () => {
    setHeapGrowingPercent(MAX_HEAP_GROWING_PERCENT);
    setHeapGrowingPercent(0); // V8's default again, for the tests that follow in this process
  });

  it("makes V8 collect fully less often, in isolates started afterwards (a worker thread)", async () => {
    // Wrappers that outlive a young-generation collection and then die (as a rank's tensor wrappers do): V8's own factor runs a
    // full collection every few MiB of them; a factor of 10 (900%) runs fewer. Counted by the worker's own GC performance entries.
    const source = `
      const { PerformanceObserver, constants } = require("node:perf_hooks");
      const { parentPort } = require("node:worker_threads");
      let majors = 0;
      const observer = new PerformanceObserver((list) => {
        for (const e of list.getEntries()) if (e.detail && e.detail.kind === constants.NODE_PERFORMANCE_GC_MAJOR) majors++;
      });
      observer.observe({ entryTypes: ["gc"] });
      (async () => {
        const ring = new Array(60000);
        for (let i = 0; i < 3000000; i++) {
          ring[i % ring.length] = { shape: [i, 2, 3], data: new Float32Array(16) };
          if (i % 20000 === 0) await new Promise((r) => setImmediate(r));
        }
        await new Promise((r) => setTimeout(r, 50));
        observer.disconnect();
        parentPort.postMessage(majors);
      })();`;
    const majorCollections = (percent: number) => {
      setHeapGrowingPercent(percent);
      return new Promise<number>((resolve, reject) => {
        const worker = new Worker(source, { eval: true });
        worker.once("message", resolve);
        worker.once("error", reject);
      });
    };
    try {
      const byDefault = await majorCollections(0);
      const grown = await majorCollections(900);
      expect(byDefault).toBeGreaterThanOrEqual(4);
      expect(grown).toBeLessThanOrEqual(byDefault * 0.6);
    } finally {
      setHeapGrowingPercent(0);
    }
  }, 30_000);

  it("names a value out of range or not an integer", () => {
    for (const bad of [-1, 0.5, MAX_HEAP_GROWING_PERCENT + 1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => setHeapGrowingPercent(bad)).toThrow(KernelError);
      expect(() => setHeapGrowingPercent(bad)).toThrow(`heap growing percent must be an integer from 0 to ${MAX_HEAP_GROWING_PERCENT}, got ${bad}`);
    }
  });
});
