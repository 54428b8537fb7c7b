/**
 * Worker for first-session-race.ts: waits at a shared barrier, then makes
 * this thread's first FusedAttention session (the process's first too, for
 * all the workers at once) and reports success or the error.
 */
import { parentPort, workerData } from "node:worker_threads";
import { Tensor } from "@ulysses/tensors";
import { FusedAttention } from "../index.js";

const { gate } = workerData as { gate: Int32Array };
const q = new Tensor(
  "float32",
  [1, 8, 2, 8],
  Float32Array.from({ length: 128 }, (_, i) => Math.sin(i)),
);
Atomics.add(gate, 1, 1);
Atomics.wait(gate, 0, 0);
try {
  const fused = new FusedAttention({ threads: 1 });
  await fused.forward(q, q, q, { causal: true });
  parentPort!.postMessage({ ok: true });
} catch (error) {
  parentPort!.postMessage({ ok: false, message: error instanceof Error ? error.message : String(error) });
}
