/**
 * OutputPool and FusedOps.release: a given-back buffer is handed out again
 * for the next output of its byte length (and nothing else is taken back),
 * within the pool's limits; NativeSessionCache's runs and FusedOps' outputs
 * draw from the same pool, and give the same results as fresh outputs.
 */
import { afterAll, describe, expect, it } from "vitest";
import { randomTensor, seededRandom } from "@ulysses/kernels";
import { Tensor } from "@ulysses/tensors";
import { createFusedOps, fusedAttentionStatus, NativeSessionCache, OUTPUT_POOL_BYTES, OutputPool } from "./index.js";

describe("OutputPool", () => {
  it("hands a given-back buffer out again for the same byte length, of either dtype", () => {
    const pool = new OutputPool({ maxBytes: 1 << 20 });
    const a = pool.take("float32", 100);
    pool.give(a);
    expect(pool.bytes).toBe(400);
    const b = pool.take("int32", 100);
    expect(b).toBeInstanceOf(Int32Array);
    expect(b.buffer).toBe(a.buffer);
    expect(pool.reused).toBe(1);
    expect(pool.bytes).toBe(0);
    expect(pool.take("float32", 100).buffer).not.toBe(a.buffer); // b is out: a fresh one
    const c = pool.take("float32", 99);
    expect(c.buffer).not.toBe(a.buffer);
  });

  it("takes back only whole buffers it handed out, each once", () => {
    const pool = new OutputPool({ maxBytes: 1 << 20 });
    pool.give(new Float32Array(64)); // the caller's
    const a = pool.take("float32", 64);
    pool.give(a.subarray(16)); // a view of part of it
    expect(pool.bytes).toBe(0);
    pool.give(a);
    pool.give(a); // twice: the second is ignored
    expect(pool.bytes).toBe(256);
    expect(pool.take("float32", 64).buffer).toBe(a.buffer);
    expect(pool.take("float32", 64).buffer).not.toBe(a.buffer);
  });

  it("keeps at most maxBytes and perSize buffers; maxBytes 0 keeps none", () => {
    const pool = new OutputPool({ maxBytes: 1000, perSize: 2 });
    const small = [0, 1, 2].map(() => pool.take("float32", 25)); // 100 bytes each
    for (const s of small) pool.give(s);
    expect(pool.bytes).toBe(200); // perSize 2
    const big = pool.take("float32", 250); // 1000 bytes: over maxBytes with the 200 kept
    pool.give(big);
    expect(pool.bytes).toBe(200);
    pool.clear();
    expect(pool.bytes).toBe(0);
    const none = new OutputPool({ maxBytes: 0 });
    const x = none.take("float32", 10);
    none.give(x);
    expect(none.bytes).toBe(0);
    expect(none.take("float32", 10).buffer).not.toBe(x.buffer);
  });

  it("poison fills given-back buffers with NaN", () => {
    const pool = new OutputPool({ maxBytes: 1 << 20, poison: true });
    const a = pool.take("float32", 8);
    a.fill(1);
    pool.give(a);
    expect(Array.from(pool.take("float32", 8), Number.isNaN)).toEqual(new Array(8).fill(true));
  });

  it("rejects a maxBytes that is not a non-negative integer, naming it", () => {
    for (const bad of [-1, 1.5, Number.NaN])
      expect(() => new OutputPool({ maxBytes: bad })).toThrow(`OutputPool: maxBytes must be a non-negative integer, got ${bad}`);
  });
});

const status = fusedAttentionStatus();
const suite = status.available
  ? "FusedOps.release and NativeSessionCache's pool"
  : `FusedOps.release and NativeSessionCache's pool (skipped: ${status.reason})`;

describe.skipIf(!status.available)(suite, () => {
  const caches: NativeSessionCache[] = [];
  afterAll(async () => {
    await Promise.all(caches.map((c) => c.release()));
  });
  const rand = (shape: number[], seed: number) => randomTensor(shape, seededRandom(seed));

  it("pools by default only with memoryArena; outputPoolBytes overrides", () => {
    const withArena = new NativeSessionCache({ intraOpThreads: 1, memoryArena: true });
    const without = new NativeSessionCache({ intraOpThreads: 1 });
    const sized = new NativeSessionCache({ intraOpThreads: 1, outputPoolBytes: 4096 });
    caches.push(withArena, without, sized);
    for (const [cache, bytes] of [
      [withArena, OUTPUT_POOL_BYTES],
      [without, 0],
      [sized, 4096],
    ] as const) {
      const a = cache.outputs.take("float32", 256);
      cache.outputs.give(a);
      expect(cache.outputs.bytes).toBe(bytes >= 1024 ? 1024 : 0);
    }
  });

  it("released outputs come back as later outputs (native ops and ONNX Runtime runs), with the results of fresh ones", async () => {
    const cache = new NativeSessionCache({ intraOpThreads: 1, memoryArena: true, poisonReleased: true });
    const fresh = new NativeSessionCache({ intraOpThreads: 1, memoryArena: true, outputPoolBytes: 0 });
    caches.push(cache, fresh);
    const ops = createFusedOps(cache);
    const plain = createFusedOps(fresh);
    const x = rand([16, 32], 1);
    const w = rand([32, 32], 2);
    for (const o of [ops, plain]) {
      await o.linearForward(x, w); // first runs go through onnxruntime-node
      await o.linearForward(x, w);
    }
    const g = await ops.geluForward(x);
    ops.release!(g);
    expect(cache.outputs.bytes).toBe(g.data.byteLength);
    const y = await ops.linearForward(x, w); // [16, 32]: g's size
    expect(y.data.buffer).toBe(g.data.buffer);
    expect(Array.from(y.data)).toEqual(Array.from((await plain.linearForward(x, w)).data));
    ops.release!(y);
    const h = await ops.geluForward(x);
    expect(h.data.buffer).toBe(g.data.buffer);
    expect(Array.from(h.data)).toEqual(Array.from((await plain.geluForward(x)).data));
    ops.release!(x, new Tensor("float32", [2], new Float32Array(2))); // not the ops': left alone
    expect(cache.outputs.bytes).toBe(0);
    expect(cache.outputs.reused).toBe(2);
  });
});
