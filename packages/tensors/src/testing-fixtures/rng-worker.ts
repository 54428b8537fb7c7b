/**
 * Test fixture: runs in a worker_thread, draws from a seeded generator and
 * posts the numbers back, then exits on its own. See random.test.ts.
 */
import { isMainThread, parentPort, threadId, workerData } from "node:worker_threads";
import { Rng, randomNormal } from "@ulysses/tensors";

const { seed, stream, count } = workerData as { seed: bigint; stream: number; count: number };
const rng = new Rng(seed, stream);
const uniforms = Array.from({ length: count }, () => rng.uniform());
const normals = Array.from({ length: count }, () => rng.normal());
const ints = Array.from({ length: count }, () => rng.int(1000));
const tensor = randomNormal([count], { seed, stream: stream + 1 }).data;
parentPort!.postMessage({ isMainThread, threadId, uniforms, normals, ints, tensor });
