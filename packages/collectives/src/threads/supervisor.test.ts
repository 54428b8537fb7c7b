import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { launch } from "./launch.js";
import { RankSupervisor, SETTLE_MS } from "./supervisor.js";

const entry = fileURLToPath(new URL("../testing-fixtures/echo-entry.ts", import.meta.url));

interface Api {
  info(): { rank: number };
  step(stuck: number): number;
  failOrWait(failing: number): Promise<void>;
}

const TIMEOUT_MS = 1000;

async function supervised(worldSize: number): Promise<RankSupervisor<Api>> {
  return new RankSupervisor(await launch<Api>({ worldSize, entry, timeoutMs: TIMEOUT_MS }), TIMEOUT_MS);
}

describe("RankSupervisor", () => {
  it("answers in rank order when every rank answers", async () => {
    const ranks = await supervised(3);
    expect(await ranks.call("step", [-1], { what: "step 1", watchdog: true })).toEqual([0, 1, 2]);
    await ranks.close("info");
    expect(ranks.world.liveWorkers()).toBe(0);
  });

  it("names a rank stuck in compute once its peers have answered and it has not within the timeout, and terminates it at close", async () => {
    const ranks = await supervised(3);
    const started = Date.now();
    await expect(ranks.call("step", [1], { what: "step 4", watchdog: true })).rejects.toThrow(
      /^rank 1 did not finish step 4 within 1 s \(stuck in compute\?\) \(ranks 0, 2 finished it\)$/,
    );
    const waited = Date.now() - started;
    expect(waited).toBeGreaterThanOrEqual(TIMEOUT_MS - 50);
    expect(ranks.stuckRanks()).toEqual([1]);
    expect(ranks.world.failure()?.rank).toBe(1);
    await ranks.close("info");
    expect(ranks.world.liveWorkers()).toBe(0);
  }, 30_000);

  it("rejects with the failing rank's error once the others have settled, within SETTLE_MS, not the collective timeout", async () => {
    const ranks = await supervised(3);
    const started = Date.now();
    await expect(ranks.call("failOrWait", [2])).rejects.toThrow(/rank 2 refused/);
    // the failure aborts the world, so the peers' barrier rejects at once instead of timing out
    expect(Date.now() - started).toBeLessThan(Math.min(TIMEOUT_MS, SETTLE_MS + 400));
    expect(ranks.stuckRanks()).toEqual([]);
    await ranks.close("info");
    expect(ranks.world.liveWorkers()).toBe(0);
  }, 30_000);
});
