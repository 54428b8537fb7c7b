/** Test fixture: a rank that makes calls whose headers exceed the threads backend's fixed-size slots. */
import { Tensor } from "@ulysses/tensors";
import type { RankContext } from "../threads/protocol.js";

const outcome = (p: Promise<unknown>) =>
  p.then(
    () => "resolved",
    (e: Error) => `${e.name}: ${e.message}`,
  );

export default function setup({ group }: RankContext) {
  const manyAxes = (axes: number, value: number) => Tensor.from("float32", new Array<number>(axes).fill(1), [value]);
  return {
    /** Rank 0 sends a tensor of `axes` axes to rank 1; returns each side's outcome, then the received value. */
    async p2p(axes: number) {
      const t = manyAxes(axes, group.rank === 0 ? 42 : 0);
      const text = await outcome(group.rank === 0 ? group.send(t, 1, 5) : group.recv(t, 0, 5));
      return { text, value: t.data[0] };
    },
    /** A p2p mismatch whose message is longer than the mailbox (both shapes have many axes). */
    async longMismatch(axes: number) {
      const t = Tensor.from("float32", new Array<number>(axes).fill(1).concat(group.rank === 0 ? [2] : [3]), new Float32Array(group.rank === 0 ? 2 : 3));
      return outcome(group.rank === 0 ? group.send(t, 1) : group.recv(t, 0));
    },
    async allReduce(axes: number) {
      const t = manyAxes(axes, group.rank + 1);
      const text = await outcome(group.allReduce(t));
      return { text, value: t.data[0] };
    },
    /** An allReduce after the above: the group still works. */
    async sum() {
      const t = Int32Array.from([1]);
      await group.allReduce(t);
      return t[0];
    },
  };
}
