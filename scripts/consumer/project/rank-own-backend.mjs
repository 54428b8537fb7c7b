// Rank entry that registers its own backend at top level ("wrapped", over
// threads), then reports what every way of getting a group sees.
import { CollectiveError, createThreadsGroup, getBackend, init, registerBackend } from "@ulysses/collectives";
import { Tensor } from "@ulysses/tensors";

registerBackend("wrapped", async (options) => {
  const group = await getBackend("threads")(options);
  return new Proxy(group, { get: (target, key) => (key === "backend" ? "wrapped" : Reflect.get(target, key)) });
});

export default async function setup({ group, rank, worldSize }) {
  return {
    async identity() {
      const viaInit = await init({ backend: "threads" });
      const viaThreads = await createThreadsGroup();
      // every rank contributes rank + 1: the sum proves the ranks really share one world
      const sum = await group.allReduce(Tensor.from("float32", [1], [group.rank + 1]));
      return {
        contextRank: rank,
        contextSize: worldSize,
        backend: group.backend,
        rank: group.rank,
        size: group.size,
        initRank: viaInit.rank,
        initSize: viaInit.size,
        threadsRank: viaThreads.rank,
        threadsSize: viaThreads.size,
        sum: sum.data[0],
      };
    },
    async errorClass() {
      try {
        // splits that do not add up to the input length: refused on every rank
        await group.allToAll(Tensor.zeros("float32", [group.size * 2]), { inputSplits: new Array(group.size).fill(1) });
        return { threw: false };
      } catch (error) {
        return { threw: true, isCollectiveError: error instanceof CollectiveError, name: error?.name, message: String(error?.message) };
      }
    },
    async fail() {
      throw new CollectiveError(`rank ${rank} fails on purpose`);
    },
  };
}
