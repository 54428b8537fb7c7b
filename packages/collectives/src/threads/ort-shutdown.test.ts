import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { launch } from "./launch.js";

const entry = fileURLToPath(new URL("../testing-fixtures/ort-entry.ts", import.meta.url));

interface OrtApi {
  compute(reps: number): Promise<number>;
  runInsideBarrier(): Promise<{ value: number; barrierDone: boolean }>;
  finishBarrier(): Promise<boolean>;
  barrier(): Promise<boolean>;
  failAfter(ms: number): Promise<never>;
}

describe("threads backend with ONNX Runtime in the ranks", () => {
  it("runs sessions next to collectives, and survives a peer failing while a rank is inside session.run", async () => {
    const world = await launch<OrtApi>({ worldSize: 2, entry, timeoutMs: 30_000, ortThreadsPerRank: 1 });
    try {
      // rank 0 enters a barrier and completes a session.run while it waits: the wait leaves the event loop free
      expect(await world.rank(0).runInsideBarrier()).toEqual({ value: 1, barrierDone: false });
      expect(await world.rank(1).barrier()).toBe(true);
      expect(await world.rank(0).finishBarrier()).toBe(true);
      expect(await world.all("compute", 1)).toEqual([3, 3]);
      // rank 0 loops over long runs; rank 1 fails; shutdown comes while rank 0 is still computing
      const _computing = world
        .rank(0)
        .compute(100_000)
        .then(
          () => "resolved",
          (e: Error) => e.message,
        );
      await expect(world.rank(1).failAfter(200)).rejects.toThrow("rank 1 gives up");
      expect(world.liveWorkers()).toBe(2);
    } finally {
      const codes = await world.shutdown();
      expect(codes).toEqual([0, 0]);
      expect(world.liveWorkers()).toBe(0);
    }
  });
});
