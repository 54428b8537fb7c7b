import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { CollectiveError } from "../errors.js";
import { launch, type LaunchedWorld } from "./launch.js";

const entry = fileURLToPath(new URL("../testing-fixtures/echo-entry.ts", import.meta.url));

interface EchoApi {
  info(): { rank: number; worldSize: number; size: number; backend: string; ortThreads: number };
  allToAll(rows: number, cols: number): Promise<number[]>;
  allReduce(values: number[]): Promise<number[]>;
  fail(message: string): Promise<never>;
  crash(message: string): string;
  exit(code: number): Promise<never>;
  spin(): string;
  barrier(): Promise<void>;
  recv(peer: number, length: number): Promise<number[]>;
  print(text: string): void;
}

const worlds: LaunchedWorld<EchoApi>[] = [];
async function start(worldSize: number, timeoutMs = 20_000): Promise<LaunchedWorld<EchoApi>> {
  const world = await launch<EchoApi>({ worldSize, entry, timeoutMs });
  worlds.push(world);
  return world;
}

afterEach(async () => {
  for (const world of worlds.splice(0)) {
    await world.shutdown();
    expect(world.liveWorkers()).toBe(0);
  }
});

describe("threads backend failures", () => {
  it("before: a rank that crashed (uncaught exception) before any collective makes the peer's collective reject at once, naming it", async () => {
    const world = await start(2);
    expect(await world.all("info")).toEqual([
      { rank: 0, worldSize: 2, size: 2, backend: "threads", ortThreads: expect.any(Number) },
      { rank: 1, worldSize: 2, size: 2, backend: "threads", ortThreads: expect.any(Number) },
    ]);
    // the crash comes from a timer after crash() returns, but the worker's "error" event and crash()'s reply travel separately:
    // under load the error can reach this thread first, and then the call rejects naming rank 1 instead of answering
    const scheduled = await world
      .rank(1)
      .crash("boom")
      .catch((e: Error) => e.message);
    expect(scheduled).toMatch(/^(scheduled|rank 1 failed: Error: boom)$/);
    // the abort message, not the timeout one: the rejection did not wait for the 20 s timeout
    await expect(world.rank(0).allToAll(2, 1)).rejects.toThrow(/aborted because rank 1 failed: Error: boom/);
    expect(world.failure()).toEqual({ rank: 1, reason: "rank 1 failed: Error: boom" });
    await expect(world.rank(1).barrier()).rejects.toThrow(/rank 1/);
  });

  it("during, P=4: after a good allReduce, a rank failing while the others wait in a barrier rejects them all; launch's call names it", async () => {
    const world = await start(4);
    expect(await world.all("allReduce", [1, 2])).toEqual(Array(4).fill([4, 8]));
    const pending = [0, 2, 3].map((r) =>
      world
        .rank(r)
        .barrier()
        .then(
          () => "resolved",
          (e: Error) => e.message,
        ),
    );
    await expect(world.rank(1).fail("mid-collective")).rejects.toThrow("mid-collective");
    for (const message of await Promise.all(pending))
      expect(message).toMatch(/barrier \(call 2 .*aborted because rank 1 failed in fail: Error: mid-collective/);
    const all = world.all("barrier").then(
      () => null,
      (e: unknown) => e,
    );
    const error = (await all) as CollectiveError;
    expect(error).toBeInstanceOf(CollectiveError);
    expect(error.message).toContain("rank 1 failed in fail");
  });

  it("during and after: a rank that exits mid-collective rejects the peer's pending and later calls; calls to it reject", async () => {
    const world = await start(2);
    await world.all("barrier");
    const pending = world
      .rank(0)
      .barrier()
      .then(
        () => "resolved",
        (e: Error) => e.message,
      );
    await expect(world.rank(1).exit(3)).rejects.toThrow("rank 1 exited with code 3");
    expect(await pending).toMatch(/aborted because rank 1 exited with code 3/);
    await expect(world.rank(0).allToAll(2, 1)).rejects.toThrow(/rank 1 exited with code 3/);
    await expect(world.rank(1).barrier()).rejects.toThrow(/rank 1 exited/);
    expect(world.liveWorkers()).toBe(1);
  });

  it("a rank that never calls makes the others reject after the timeout, naming it", async () => {
    const world = await start(2, 300);
    await expect(world.rank(0).barrier()).rejects.toThrow(
      /barrier \(call 1 on group of world ranks \[0, 1\]\): world rank\(s\) 1 did not arrive within 300 ms/,
    );
    // the group is broken from then on, on every rank
    await expect(world.rank(1).barrier()).rejects.toThrow(/aborted because .* did not arrive/);
  });

  it("a watchdog's abort rejects the peers' collectives naming its reason, and shutdown terminates a stuck rank at once", async () => {
    const world = await start(2);
    expect(await world.rank(1).spin()).toBe("spinning");
    const pending = world
      .rank(0)
      .barrier()
      .then(
        () => "resolved",
        (e: Error) => e.message,
      );
    world.abort(1, "rank 1 did not finish step 3 within 5 s (stuck in compute?)");
    expect(await pending).toMatch(/aborted because rank 1 did not finish step 3 within 5 s \(stuck in compute\?\)/);
    expect(world.failure()).toEqual({ rank: 1, reason: "rank 1 did not finish step 3 within 5 s (stuck in compute?)" });
    const started = performance.now();
    await world.shutdown({ terminate: [1] });
    expect(performance.now() - started).toBeLessThan(5000);
    expect(world.liveWorkers()).toBe(0);
  });

  it("a chain of waits (a ring): the first timeout names the rank stuck in compute at the chain's end, not the live rank it waits on", async () => {
    // rank 2 spins; rank 1 waits to receive from rank 2; rank 0, which started waiting first, waits to receive from rank 1
    const world = await launch<EchoApi>({ worldSize: 3, entry, timeoutMs: 1500 });
    try {
      expect(await world.rank(2).spin()).toBe("spinning");
      const first = world
        .rank(0)
        .recv(1, 4)
        .then(
          (values) => `received ${values}`,
          (e: Error) => e.message,
        );
      await new Promise((wait) => setTimeout(wait, 300));
      const second = world
        .rank(1)
        .recv(2, 4)
        .then(
          (values) => `received ${values}`,
          (e: Error) => e.message,
        );
      const message = await first;
      expect(world.failure()?.rank, message).toBe(2);
      expect(message).toMatch(
        /recv on rank 0 from rank 1 .*world rank\(s\) 1 did not send within 1500 ms \(noticed by world rank 0\); world rank 2 has not run its event loop for \d+ ms \(stuck in compute\?\)/,
      );
      expect(await second).toMatch(/aborted because/);
    } finally {
      // rank 2 never yields: only terminating it ends it
      await world.shutdown({ terminate: [2] });
    }
    expect(world.liveWorkers()).toBe(0);
  });

  it("launch rejects, and leaves no worker alive, when a rank's setup throws", async () => {
    await expect(launch<EchoApi>({ worldSize: 1, entry, args: { failSetup: true } })).rejects.toThrow(/rank 0 failed to start: Error: setup refused on rank 0/);
  });
});
