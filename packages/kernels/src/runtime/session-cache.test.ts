import { describe, expect, it } from "vitest";
import { Tensor } from "@ulysses/tensors";
import { GraphBuilder, SessionCache, decodeModel } from "@ulysses/kernels";

describe("SessionCache", () => {
  it("runs a MatMul graph and reuses the session", async () => {
    const cache = new SessionCache({ intraOpThreads: 1 });
    const build = () => {
      const g = new GraphBuilder("mm");
      const a = g.input("a", "float32", ["m", 2]);
      const b = g.input("b", "float32", [2, 2]);
      g.output(g.op("MatMul", [a, b]), "y");
      return g.encode();
    };
    expect(decodeModel(build()).graph?.node?.length).toBe(2);
    const a = Tensor.from("float32", [1, 2], [1, 2]);
    const b = Tensor.from("float32", [2, 2], [1, 2, 3, 4]);
    const r1 = await cache.run("mm", build, { a, b });
    const r2 = await cache.run("mm", build, { a, b });
    expect(Array.from(r1.y!.data as Float32Array)).toEqual([7, 10]);
    expect(Array.from(r2.y!.data as Float32Array)).toEqual([7, 10]);
    expect(cache.size).toBe(1);
    await cache.release();
  });
  it("with a garbage collector, collects before a run whose outputs (known from its key's last run) reach the budget, not after", async () => {
    const cache = new SessionCache({ intraOpThreads: 1, collectGarbageEvery: 1000 });
    const build = () => {
      const g = new GraphBuilder("neg");
      g.output(g.op("Neg", [g.input("x", "float32", [256])]), "y");
      return g.encode();
    };
    const x = new Tensor("float32", [256]);
    const collector = cache.collector!;
    await cache.run("neg", build, { x }); // 1024 bytes, not known before: collected after
    expect(collector.collections).toBe(1);
    await cache.run("neg", build, { x }); // known: nothing allocated since the collection, so none before; none after
    expect(collector.collections).toBe(1);
    await cache.run("neg", build, { x }); // 1024 + 1024 would pass 1000: collected before the run
    expect(collector.collections).toBe(2);
    await cache.release();
  });
  it("refuses cuda with an install hint when it is missing", () => {
    expect(() => new SessionCache({ executionProvider: "cuda" })).toThrow(/README/);
  });
});
