/**
 * processSharedFloats: one mapping per name for the whole process. A worker
 * thread's view is the main thread's memory (a write on one side is read on
 * the other), the views are ordinary ArrayBuffers that ONNX Runtime runs on
 * (it refuses a SharedArrayBuffer's), and another size under a taken name
 * is refused.
 */
import { randomUUID } from "node:crypto";
import { Worker } from "node:worker_threads";
import { OrtOps, SessionCache } from "@ulysses/kernels";
import { Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { fusedAttentionStatus } from "./fused-attention.js";
import { addonPath, processSharedFloats } from "./native.js";

const available = fusedAttentionStatus().available;

// a worker that maps the same name, reads what the main thread wrote and writes its own values after it
const worker = `
const { workerData, parentPort } = require("node:worker_threads");
const binding = require(workerData.addon);
const view = new Float32Array(binding.sharedMemory(workerData.name, 4 * workerData.length));
const seen = Array.from(view.subarray(0, 4));
for (let i = 4; i < 8; i++) view[i] = 10 * i;
parentPort.postMessage(seen);
`;

describe.skipIf(!available)("processSharedFloats (the native addon's process-wide memory)", () => {
  it("a worker thread's view of a name is the main thread's memory, both ways", async () => {
    const name = `test-${randomUUID()}`;
    const view = processSharedFloats(name, 8);
    expect(view.buffer).not.toBeInstanceOf(SharedArrayBuffer);
    expect([...view]).toEqual(new Array(8).fill(0));
    view.set([1.5, -2, 3, 4]);
    const seen = await new Promise<number[]>((resolve, reject) => {
      const w = new Worker(worker, { eval: true, workerData: { addon: addonPath(), name, length: 8 } });
      w.once("message", resolve);
      w.once("error", reject);
    });
    expect(seen).toEqual([1.5, -2, 3, 4]);
    expect([...view.subarray(4)]).toEqual([40, 50, 60, 70]);
    // a second view in this thread is the same memory too
    const again = processSharedFloats(name, 8);
    again[0] = 7;
    expect(view[0]).toBe(7);
  });

  it("ONNX Runtime runs on it (a linear layer's weight in it gives the product of a private copy)", async () => {
    const w = processSharedFloats(`test-${randomUUID()}`, 12);
    w.set(Array.from({ length: 12 }, (_, i) => i - 5));
    const ops = new OrtOps(new SessionCache({ intraOpThreads: 1 }));
    const x = new Tensor("float32", [2, 3], new Float32Array([1, 2, 3, -1, 0.5, 2]));
    const shared = await ops.linearForward(x, new Tensor("float32", [3, 4], w));
    const own = await ops.linearForward(x, new Tensor("float32", [3, 4], w.slice()));
    expect([...shared.data]).toEqual([...own.data]);
  });

  it("past 4 GiB (a 1.2B-parameter model's weights): one view of 5 GB, the same memory in a worker thread at its far end", async () => {
    // mapped, not touched: only the pages written below become resident
    const length = 1_250_000_000;
    const name = `test-${randomUUID()}`;
    const view = processSharedFloats(name, length);
    expect(view.length).toBe(length);
    view[length - 1] = 2.5;
    const far = `
const { workerData, parentPort } = require("node:worker_threads");
const view = new Float32Array(require(workerData.addon).sharedMemory(workerData.name, 4 * workerData.length));
view[workerData.length - 2] = -1;
parentPort.postMessage(view[workerData.length - 1]);
`;
    const seen = await new Promise<number>((resolve, reject) => {
      const w = new Worker(far, { eval: true, workerData: { addon: addonPath(), name, length } });
      w.once("message", resolve);
      w.once("error", reject);
    });
    expect(seen).toBe(2.5);
    expect(view[length - 2]).toBe(-1);
  });

  it("another size under a taken name is refused, naming both", () => {
    const name = `test-${randomUUID()}`;
    const view = processSharedFloats(name, 4);
    expect(() => processSharedFloats(name, 5)).toThrow(`'${name}' holds 16 bytes, not 20`);
    expect(view.length).toBe(4);
    expect(() => processSharedFloats(name, 0)).toThrow("length must be a positive integer, got 0");
  });
});
