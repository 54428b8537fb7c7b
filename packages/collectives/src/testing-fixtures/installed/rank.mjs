// Test fixture (compiled-launch.test.ts): a plain-JavaScript rank entry as a
// user of the installed package writes one. It imports the package by name,
// registers its own backend at top level (wrapping "threads") and reports what
// its rank sees, so the test can tell whether the entry and the worker share
// one module instance.
import { CollectiveError, createThreadsGroup, init, listBackends, registerBackend } from "@ulysses/collectives";

let wrapped = 0;
registerBackend("wrapped", async (options) => {
  wrapped++;
  return init({ ...options, backend: "threads" });
});

const errorOf = (e) => ({ collective: e instanceof CollectiveError, name: e?.name, message: String(e?.message ?? e) });

export default ({ rank, worldSize, group }) => ({
  async info() {
    const threads = await createThreadsGroup();
    return { rank, worldSize, groupRank: group.rank, groupSize: group.size, threadsSize: threads.size, wrapped, backends: listBackends() };
  },
  async mismatch() {
    try {
      await group.allReduce(new Float32Array(rank + 1));
      return { threw: false };
    } catch (e) {
      return errorOf(e);
    }
  },
  async unknownBackend() {
    try {
      await init({ backend: "no-such-backend" });
      return { threw: false };
    } catch (e) {
      return errorOf(e);
    }
  },
  async sum() {
    const t = new Float32Array([rank + 1]);
    await group.allReduce(t);
    return t[0];
  },
});
