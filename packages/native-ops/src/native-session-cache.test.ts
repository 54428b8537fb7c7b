/**
 * NativeSessionCache against SessionCache (onnxruntime-node): the same graphs
 * on the same inputs give the same outputs, element for element, whether a
 * run went through the addon or not; and the runs that should go through the
 * addon do (nativeRuns). Skipped, with the reason in the suite's name, only
 * when the native addon is not built.
 */
import { afterAll, describe, expect, it } from "vitest";
import { GraphBuilder, SessionCache, createOrtOps, type BlockOps } from "@ulysses/kernels";
import { randomTensor, seededRandom } from "@ulysses/kernels/testing";
import { Tensor } from "@ulysses/tensors";
import { NativeSessionCache, fusedAttentionStatus, nativeRateCache } from "./index.js";

const status = fusedAttentionStatus();
const suite = status.available ? "NativeSessionCache" : `NativeSessionCache (skipped: ${status.reason})`;

type F32 = Tensor<"float32">;
const rand = (shape: number[], seed: number): F32 => randomTensor(shape, seededRandom(seed));

/** Every output of `a` equals `b`'s, element for element. */
function expectSame(a: Record<string, Tensor> | Tensor, b: Record<string, Tensor> | Tensor): void {
  if (a instanceof Tensor) {
    expect(b).toBeInstanceOf(Tensor);
    const t = b as Tensor;
    expect(a.dtype).toBe(t.dtype);
    expect(a.shape).toEqual(t.shape);
    expect(Array.from(a.data as Float32Array)).toEqual(Array.from(t.data as Float32Array));
    return;
  }
  expect(Object.keys(a).sort()).toEqual(Object.keys(b as Record<string, Tensor>).sort());
  for (const k of Object.keys(a)) expectSame(a[k]!, (b as Record<string, Tensor>)[k]!);
}

/** A graph with two outputs: sum = a + b and product = a * b, over [n] tensors of `dtype`. */
function twoOutputs(key: string, n: number, dtype: "float32" | "int32" | "float64") {
  return () => {
    const g = new GraphBuilder(key);
    const a = g.input("a", dtype, [n]);
    const b = g.input("b", dtype, [n]);
    g.output(g.op("Add", [a, b]), "sum", dtype);
    g.output(g.op("Mul", [a, b]), "product", dtype);
    return g.encode();
  };
}

describe.skipIf(!status.available)(suite, () => {
  const caches: SessionCache[] = [];
  const make = <C extends SessionCache>(c: C): C => {
    caches.push(c);
    return c;
  };
  afterAll(async () => {
    await Promise.all(caches.map((c) => c.release()));
  });

  it("runs the block's ops through the addon after their first run, with onnxruntime-node's results", async () => {
    for (const memoryArena of [false, true]) {
      const native = make(new NativeSessionCache({ intraOpThreads: 1, memoryArena }));
      const viaNative = createOrtOps(native);
      const viaNode = createOrtOps(make(new SessionCache({ intraOpThreads: 1, memoryArena })));
      const x = rand([37, 24], 1);
      const w = rand([24, 40], 2);
      const b = rand([40], 3);
      const dy = rand([37, 40], 4);
      const gamma = rand([24], 5);
      const beta = rand([24], 6);
      const ids = new Tensor(
        "int32",
        [37],
        Int32Array.from({ length: 37 }, (_, i) => (i * 7) % 40),
      );
      const table = rand([40, 24], 7);
      const ops: [string, (o: BlockOps) => Promise<Record<string, Tensor> | Tensor>][] = [
        ["linearForward", (o) => o.linearForward(x, w, b)],
        ["linearBackward", async (o) => ({ ...(await o.linearBackward(x, w, dy, true)) }) as Record<string, Tensor>],
        ["layerNormForward", async (o) => ({ ...(await o.layerNormForward(x, gamma, beta, 1e-5)) }) as Record<string, Tensor>],
        ["geluForward", (o) => o.geluForward(x)],
        ["embeddingForward", (o) => o.embeddingForward(ids, table)],
      ];
      let runs = 0;
      for (const [name, op] of ops) {
        for (let i = 0; i < 3; i++) {
          const got = await op(viaNative);
          expectSame(got, await op(viaNode));
          runs++;
        }
        // the first of each op's three runs went through onnxruntime-node
        expect(native.nativeRuns, `${name}, arena ${memoryArena}`).toBe((2 * runs) / 3);
      }
    }
  });

  it("runs a requested subset of the outputs, planned apart from the full set", async () => {
    const native = make(new NativeSessionCache({ intraOpThreads: 1 }));
    const node = make(new SessionCache({ intraOpThreads: 1 }));
    const build = twoOutputs("two", 64, "float32");
    const feeds = { a: rand([64], 11), b: rand([64], 12) };
    for (let i = 0; i < 2; i++) {
      const only = await native.run("two", build, feeds, ["product"]);
      expect(Object.keys(only)).toEqual(["product"]);
      expectSame(only, await node.run("two", build, feeds, ["product"]));
      expectSame(await native.run("two", build, feeds), await node.run("two", build, feeds));
    }
    expect(native.nativeRuns).toBe(2);
  });

  it("runs int32 graphs natively; float64 ones stay on onnxruntime-node, with results computed here", async () => {
    const native = make(new NativeSessionCache({ intraOpThreads: 1 }));
    const a = new Tensor("int32", [5], Int32Array.from([1, -2, 3, 40, 5]));
    const b = new Tensor("int32", [5], Int32Array.from([7, 8, -9, 10, 0]));
    for (let i = 0; i < 2; i++) {
      const out = await native.run("ints", twoOutputs("ints", 5, "int32"), { a, b });
      expect(Array.from(out.sum!.data as Int32Array)).toEqual([8, 6, -6, 50, 5]);
      expect(Array.from(out.product!.data as Int32Array)).toEqual([7, -16, -27, 400, 0]);
    }
    expect(native.nativeRuns).toBe(1);
    const c = new Tensor("float64", [3], Float64Array.from([0.5, 1.25, -3]));
    const d = new Tensor("float64", [3], Float64Array.from([2, 4, 0.1]));
    for (let i = 0; i < 3; i++) {
      const out = await native.run("doubles", twoOutputs("doubles", 3, "float64"), { a: c, b: d });
      expect(out.sum!.dtype).toBe("float64");
      expect(Array.from(out.sum!.data as Float64Array)).toEqual([2.5, 5.25, -3 + 0.1]);
      expect(Array.from(out.product!.data as Float64Array)).toEqual([1, 5, -3 * 0.1]);
    }
    expect(native.nativeRuns).toBe(1);
  });

  it("runs other input shapes under one key through onnxruntime-node", async () => {
    const native = make(new NativeSessionCache({ intraOpThreads: 1 }));
    // a key that does not name its shapes, with a graph of symbolic length
    const build = () => {
      const g = new GraphBuilder("any-length");
      const a = g.input("a", "float32", ["n"]);
      const b = g.input("b", "float32", ["n"]);
      g.output(g.op("Add", [a, b]), "sum");
      return g.encode();
    };
    for (const n of [4, 4, 6, 6, 4]) {
      const a = rand([n], n);
      const b = rand([n], n + 1);
      const out = await native.run("any-length", build, { a, b });
      expect(out.sum!.shape).toEqual([n]);
      expect(Array.from(out.sum!.data as Float32Array)).toEqual(Array.from(a.data, (v, i) => Math.fround(v + b.data[i]!)));
    }
    // the 2nd and 5th runs match the shapes of the first (n = 4); the n = 6 runs do not
    expect(native.nativeRuns).toBe(2);
  });

  it("counts native outputs for the garbage collector before allocating them", async () => {
    const native = make(new NativeSessionCache({ intraOpThreads: 1, collectGarbageEvery: 10_000 }));
    const build = twoOutputs("gc", 512, "float32"); // 2 outputs of 2048 bytes
    const feeds = { a: rand([512], 21), b: rand([512], 22) };
    await native.run("gc", build, feeds); // 4096 bytes
    await native.run("gc", build, feeds); // 8192
    expect(native.collector!.collections).toBe(0);
    await native.run("gc", build, feeds); // 8192 + 4096 would reach 10000: collected before
    expect(native.collector!.collections).toBe(1);
    expect(native.nativeRuns).toBe(2);
  });

  it("forgets a failed first run: the next call runs first again, then natively", async () => {
    const native = make(new NativeSessionCache({ intraOpThreads: 1 }));
    const build = twoOutputs("retry", 8, "float32");
    await expect(native.run("retry", build, { a: rand([8], 31) })).rejects.toThrow(/retry/);
    const feeds = { a: rand([8], 31), b: rand([8], 32) };
    const first = await native.run("retry", build, feeds);
    expectSame(await native.run("retry", build, feeds), first);
    expect(native.nativeRuns).toBe(1);
  });

  it("nativeRateCache: arenas on, the given settings, and a recycled output serves the next native run", async () => {
    const { cache, recycle } = nativeRateCache({ intraOpThreads: 1, allowSpinning: false });
    make(cache);
    expect([cache.memoryArena, cache.intraOpThreads, cache.allowSpinning]).toEqual([true, 1, false]);
    const build = twoOutputs("rate", 64, "float32");
    const feeds = { a: rand([64], 41), b: rand([64], 42) };
    await cache.run("rate", build, feeds); // through onnxruntime-node: plans the graph
    const first = await cache.run("rate", build, feeds); // native, fresh outputs
    const sum = first.sum!.data.buffer;
    recycle(first.sum!);
    const second = await cache.run("rate", build, feeds);
    expect(cache.outputs.reused).toBe(1);
    expect([second.sum!.data.buffer, second.product!.data.buffer]).toContain(sum);
    expect(Array.from(second.sum!.data as Float32Array)).toEqual(Array.from(feeds.a.data, (v, i) => Math.fround(v + feeds.b.data[i]!)));
  });
});
