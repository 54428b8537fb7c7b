/**
 * Test fixture (compiled-launch.test.ts): a TypeScript rank entry for an
 * installed package, launched with `typescript: true` (tsx resolved from the
 * entry's folder). Same single-instance probes as rank.mjs, fewer of them.
 */
import { CollectiveError, init, registerBackend, type ProcessGroup, type RankContext } from "@ulysses/collectives";

registerBackend("wrapped", (options): Promise<ProcessGroup> => init({ ...options, backend: "threads" }));

export default ({ rank, worldSize, group }: RankContext) => ({
  info(): { rank: number; worldSize: number; groupSize: number } {
    return { rank, worldSize, groupSize: group.size };
  },
  async mismatch(): Promise<{ collective: boolean; message: string }> {
    try {
      await group.allReduce(new Float32Array(rank + 1));
      return { collective: false, message: "no error" };
    } catch (e) {
      return { collective: e instanceof CollectiveError, message: (e as Error).message };
    }
  },
});
