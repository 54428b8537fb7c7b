import { describe, expect, it } from "vitest";
import type { ParamSpec } from "./gpt-config.js";
import { ParameterStore } from "./parameters.js";

// 3 + 8 + 4 = 15 elements: over 4 ranks slices of 4, 4, 4, 3 (rank 0 holds a and b[0], rank 1 b[1 .. 5))
const specs: ParamSpec[] = [
  { name: "a", shape: [3], init: "ones", std: 0, decay: false },
  { name: "b", shape: [2, 4], init: "normal", std: 0.5, decay: true },
  { name: "c", shape: [4], init: "normal", std: 1, decay: true },
];

describe("ParameterStore sharded (ZeRO-3): a rank holds its slice only", () => {
  const whole = new ParameterStore(specs);
  whole.initialise(5);
  const shards = [0, 1, 2, 3].map((rank) => new ParameterStore(specs, { shard: { rank, ranks: 4 } }));
  for (const s of shards) s.initialise(5);

  it("holds evenSplitSizes' slice, initialised to the whole store's values", () => {
    expect(shards.map((s) => s.shard)).toEqual([
      { offset: 0, length: 4 },
      { offset: 4, length: 4 },
      { offset: 8, length: 4 },
      { offset: 12, length: 3 },
    ]);
    for (const s of shards) expect([...s.owned]).toEqual([...whole.values.subarray(s.shard.offset, s.shard.offset + s.shard.length)]);
    expect(shards[1]!.heldPart("a")).toMatchObject({ begin: 0, end: 0 });
    expect(shards[0]!.heldPart("b")).toMatchObject({ begin: 0, end: 1 });
    expect(shards[1]!.heldPart("b")).toMatchObject({ begin: 1, end: 5 });
    expect(shards[3]!.heldPart("b")).toMatchObject({ begin: 0, end: 0 });
  });

  it("refuses whole views (value, values) naming the slice, and a gather without a gatherer", async () => {
    expect(() => shards[1]!.value("b")).toThrow(/'b': the weights are sharded \(ZeRO-3\)/);
    expect(() => shards[1]!.values).toThrow(/holds flat elements \[4, 8\) of 15/);
    await expect(shards[1]!.gatherParameter("b")).rejects.toThrow(/no gatherer is installed/);
    expect(() => new ParameterStore(specs, { shard: { rank: 4, ranks: 4 } })).toThrow(/rank 4 of 4 is not a rank/);
    expect(() => new ParameterStore(specs, { values: new Float32Array(15), shard: { rank: 0, ranks: 2 } })).toThrow(/not both/);
  });

  it("gathers through the installed gatherer; an unsharded store copies; setParameter keeps the slice's part", async () => {
    const store = shards[2]!;
    const asked: [number, number][] = [];
    store.gatherWith(async (at, into) => {
      asked.push([at, into.length]);
      // the ranks' slices back to back, as an all-gather gives them
      for (let i = 0; i < into.length; i++) {
        const flat = at + i;
        const holder = shards.find((s) => flat >= s.shard.offset && flat < s.shard.offset + s.shard.length)!;
        into[i] = holder.owned[flat - holder.shard.offset]!;
      }
    });
    expect([...(await store.gatherParameter("b")).data]).toEqual([...whole.value("b").data]);
    expect(asked).toEqual([[3, 8]]);
    const copy = new Float32Array(4);
    await whole.gather(11, copy);
    expect([...copy]).toEqual([...whole.value("c").data]);
    await expect(whole.gather(12, copy)).rejects.toThrow(/\[12, 16\) lie outside the 15 parameters/);
    store.setParameter("c", Float32Array.from([10, 11, 12, 13]));
    // rank 2 holds flat [8, 12): b's last 3 and c's first
    expect([...store.owned]).toEqual([...whole.values.subarray(8, 11), 10]);
    expect(() => store.setParameter("c", new Float32Array(3))).toThrow(/'c' has 4 elements, the values given 3/);
  });

  it("runs gathers one at a time in call order, however they are awaited (a prefetch is a run of collectives)", async () => {
    const store = new ParameterStore(specs, { shard: { rank: 0, ranks: 2 } });
    const log: string[] = [];
    const release: (() => void)[] = [];
    store.gatherWith(async (at) => {
      log.push(`start ${at}`);
      await new Promise<void>((resolve) => release.push(resolve));
      log.push(`end ${at}`);
    });
    const first = store.gather(3, new Float32Array(8));
    const second = store.gather(11, new Float32Array(4));
    await new Promise((resolve) => setTimeout(resolve, 5));
    // the second has not started while the first waits
    expect(log).toEqual(["start 3"]);
    release.shift()!();
    await first;
    await new Promise((resolve) => setTimeout(resolve, 5));
    expect(log).toEqual(["start 3", "end 3", "start 11"]);
    release.shift()!();
    await second;
    // a failed gather rejects its caller and does not hold up the next
    store.gatherWith(async (at) => {
      if (at === 0) throw new Error("peer gone");
    });
    const failed = store.gather(0, new Float32Array(3));
    const after = store.gather(3, new Float32Array(8));
    await expect(failed).rejects.toThrow(/peer gone/);
    await expect(after).resolves.toBeUndefined();
  });
});
