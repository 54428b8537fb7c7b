/**
 * BufferPool: a given-back buffer is handed out again for the next array of
 * its byte length (and nothing else is taken back), within the pool's limits.
 */
import { describe, expect, it } from "vitest";
import { BufferPool } from "./buffer-pool.js";

describe("BufferPool", () => {
  it("hands a given-back buffer out again for the same byte length, of either dtype", () => {
    const pool = new BufferPool({ maxBytes: 1 << 20 });
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
    const pool = new BufferPool({ maxBytes: 1 << 20 });
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

  it("keeps at most maxBytes and perSize buffers; maxBytes 0 keeps none, no maxBytes any number under perSize", () => {
    const pool = new BufferPool({ maxBytes: 1000, perSize: 2 });
    const small = [0, 1, 2].map(() => pool.take("float32", 25)); // 100 bytes each
    for (const s of small) pool.give(s);
    expect(pool.bytes).toBe(200); // perSize 2
    const big = pool.take("float32", 250); // 1000 bytes: over maxBytes with the 200 kept
    pool.give(big);
    expect(pool.bytes).toBe(200);
    pool.clear();
    expect(pool.bytes).toBe(0);
    const unlimited = new BufferPool();
    const many = [0, 1, 2, 3].map(() => unlimited.take("float32", 1 << 16));
    for (const m of many) unlimited.give(m);
    expect(unlimited.bytes).toBe(4 << 18);
    const none = new BufferPool({ maxBytes: 0 });
    const x = none.take("float32", 10);
    none.give(x);
    expect(none.bytes).toBe(0);
    expect(none.take("float32", 10).buffer).not.toBe(x.buffer);
  });

  it("poison fills given-back buffers with NaN", () => {
    const pool = new BufferPool({ maxBytes: 1 << 20, poison: true });
    const a = pool.take("float32", 8);
    a.fill(1);
    pool.give(a);
    expect(Array.from(pool.take("float32", 8), Number.isNaN)).toEqual(new Array(8).fill(true));
  });

  it("rejects a maxBytes that is not a non-negative integer, naming it", () => {
    for (const bad of [-1, 1.5, Number.NaN])
      expect(() => new BufferPool({ maxBytes: bad })).toThrow(`BufferPool: maxBytes must be a non-negative integer, got ${bad}`);
  });
});
