import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { startRanks } from "./start-ranks.js";

const entry = fileURLToPath(new URL("./testing-fixtures/echo-entry.ts", import.meta.url));

interface Api {
  info(): { rank: number; worldSize: number; backend: string; ortThreads: number };
  allReduce(values: number[]): Promise<number[]>;
  failOrWait(failing: number): Promise<void>;
}

describe("startRanks", () => {
  for (const backend of ["local", "threads"] as const) {
    it(`${backend}: runs the entry's setup once per rank and calls every rank, results in rank order`, async () => {
      const world = await startRanks<Api>({ backend, worldSize: 3, entry, args: undefined, timeoutMs: 5000, ortThreadsPerRank: 2 });
      expect(world.ranks).toEqual([0, 1, 2]);
      const info = await world.call("info", []);
      expect(info.map((i) => [i.rank, i.worldSize, i.ortThreads])).toEqual([
        [0, 3, 2],
        [1, 3, 2],
        [2, 3, 2],
      ]);
      expect(await world.call("allReduce", [[1, 2]])).toEqual(Array(3).fill([3, 6]));
      expect((await world.leader()!.info()).rank).toBe(0);
      await world.close("info");
    }, 30_000);
  }

  it("local: a failing rank's error names it", async () => {
    const world = await startRanks<Api>({ backend: "local", worldSize: 2, entry, args: undefined, timeoutMs: 500 });
    await expect(world.call("failOrWait", [1])).rejects.toThrow(/^rank 1 failed: rank 1 refused$/);
    await world.close("info");
  });

  it("local: a setup that throws rejects the start naming the rank", async () => {
    await expect(startRanks<Api>({ backend: "local", worldSize: 2, entry, args: { failSetup: true }, timeoutMs: 500 })).rejects.toThrow(
      /^rank 1 failed to start: setup refused on rank 1$/,
    );
  });
});
