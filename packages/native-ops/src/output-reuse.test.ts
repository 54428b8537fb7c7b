/**
 * FusedOps.release and NativeSessionCache's BufferPool: released outputs
 * come back as later outputs of their byte length (native ops and ONNX
 * Runtime runs alike), with the results of fresh ones; the pool is on by
 * default only with memoryArena.
 */
import { afterAll, describe, expect, it } from "vitest";
import { randomTensor, seededRandom } from "@ulysses/kernels/testing";
import { Tensor } from "@ulysses/tensors";
import { createFusedOps, fusedAttentionStatus, NativeSessionCache, OUTPUT_POOL_BYTES } from "./index.js";

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
