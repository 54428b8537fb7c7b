/**
 * Test fixture: a rank that holds an onnxruntime-node InferenceSession (a
 * chain of MatMuls) and runs long compute steps next to collectives. Its
 * dispose abandons the compute loop, waits for the run in flight and
 * releases the session, so the worker can exit by itself.
 */
import * as ort from "onnxruntime-node";
import { GraphBuilder } from "@ulysses/kernels";
import type { RankContext } from "../threads/protocol.js";

const N = 256;

function chainGraph(links: number): Uint8Array {
  const g = new GraphBuilder("matmul-chain");
  let x = g.input("x", "float32", [N, N]);
  const w = g.input("w", "float32", [N, N]);
  for (let i = 0; i < links; i++) x = g.op("MatMul", [x, w]);
  g.output(x, "y");
  return g.encode();
}

export default async function setup({ rank, group, ortThreads }: RankContext) {
  const session = await ort.InferenceSession.create(chainGraph(8), { intraOpNumThreads: ortThreads, interOpNumThreads: 1 });
  // w = I / 1: the chain keeps x unchanged, so results are checkable
  const identity = new Float32Array(N * N);
  for (let i = 0; i < N; i++) identity[i * N + i] = 1;
  const feeds = () => ({ x: new ort.Tensor("float32", new Float32Array(N * N).fill(rank + 1), [N, N]), w: new ort.Tensor("float32", identity, [N, N]) });
  let stopping = false;
  let pendingBarrier: Promise<boolean> | null = null;
  let inFlight: Promise<unknown> = Promise.resolve();
  const run = () => {
    const p = session.run(feeds());
    inFlight = p.catch(() => undefined);
    return p;
  };
  return {
    /** Runs the chain up to `reps` times (until disposed), then all-reduces the first output element. */
    async compute(reps: number) {
      let first = 0;
      for (let i = 0; i < reps && !stopping; i++) first = ((await run()).y!.data as Float32Array)[0]!;
      const t = Float32Array.from([first]);
      await group.allReduce(t);
      return t[0];
    },
    /** Enters a barrier, then runs the session while the barrier waits (the wait leaves the event loop free). */
    async runInsideBarrier() {
      let barrierDone = false;
      pendingBarrier = group.barrier().then(() => (barrierDone = true));
      const value = ((await run()).y!.data as Float32Array)[0];
      return { value, barrierDone };
    },
    async finishBarrier() {
      return pendingBarrier;
    },
    async barrier() {
      await group.barrier();
      return true;
    },
    async failAfter(ms: number) {
      await new Promise((done) => setTimeout(done, ms));
      throw new Error(`rank ${rank} gives up`);
    },
    async dispose() {
      stopping = true;
      await inFlight;
      await session.release();
    },
  };
}
