/** Test fixture: a rank that runs collectives on request and can fail on request. */
import { Tensor } from "@ulysses/tensors";
import type { RankContext } from "../threads/protocol.js";

export default function setup({ rank, worldSize, group, ortThreads, args }: RankContext<{ failSetup?: boolean } | undefined>) {
  if (args?.failSetup && rank === worldSize - 1) throw new Error(`setup refused on rank ${rank}`);
  return {
    info: () => ({ rank, worldSize, size: group.size, backend: group.backend, ortThreads }),
    async allToAll(rows: number, cols: number) {
      const input = Tensor.from(
        "float32",
        [rows, cols],
        Array.from({ length: rows * cols }, (_, i) => rank * 1000 + i),
      );
      const out = await group.allToAll(input);
      return Array.from(out.data as Float32Array);
    },
    async allReduce(values: number[]) {
      const t = Float64Array.from(values);
      await group.allReduce(t);
      return Array.from(t);
    },
    async fail(message: string) {
      throw new Error(message);
    },
    /** Throws from a timer: an uncaught exception that kills the worker. */
    crash(message: string) {
      setTimeout(() => {
        throw new Error(message);
      }, 0);
      return "scheduled";
    },
    /** Spins forever from a timer: a rank stuck in compute (it never answers again). */
    spin() {
      setTimeout(() => {
        for (;;) {
          // stuck
        }
      }, 0);
      return "spinning";
    },
    /** A step: rank `stuck` computes forever (never answers), the others answer with their rank. */
    step(stuck: number) {
      while (rank === stuck) {
        // stuck in compute
      }
      return rank;
    },
    /** Rank `failing` throws; the others wait in a barrier that it never joins. */
    async failOrWait(failing: number) {
      if (rank === failing) throw new Error(`rank ${rank} refused`);
      await group.barrier();
    },
    async exit(code: number) {
      process.exit(code);
    },
    async barrier() {
      await group.barrier();
    },
    /** Point-to-point: receives `length` float32 values from group rank `peer`. */
    async recv(peer: number, length: number) {
      const out = await group.recv(new Float32Array(length), peer);
      return Array.from(out.data as Float32Array);
    },
    print(text: string) {
      console.log(text);
    },
  };
}
