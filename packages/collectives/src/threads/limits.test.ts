import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launch, type LaunchedWorld } from "./launch.js";

const entry = fileURLToPath(new URL("../testing-fixtures/limits-entry.ts", import.meta.url));

interface LimitsApi {
  p2p(axes: number): Promise<{ text: string; value: number }>;
  longMismatch(axes: number): Promise<string>;
  allReduce(axes: number): Promise<{ text: string; value: number }>;
  sum(): Promise<number>;
}

describe("threads backend: headers larger than their shared-memory slots", () => {
  let world: LaunchedWorld<LimitsApi>;
  beforeAll(async () => {
    world = await launch<LimitsApi>({ worldSize: 2, entry, timeoutMs: 20_000 });
  });
  afterAll(async () => {
    await world?.shutdown();
  });

  it("a send header over the 1 KiB mailbox rejects on both sides with one clear message, at once; the group still works", async () => {
    const start = performance.now();
    const [sender, receiver] = await world.all("p2p", 1000);
    expect(performance.now() - start).toBeLessThan(2000);
    expect(sender!.text).toBe(receiver!.text);
    expect(sender!.text).toMatch(
      /^CollectiveError: send\/recv from rank 0 to rank 1 refused: sender rank 0: the send header of \d+ bytes \(a tensor of 1000 axes\) does not fit the threads backend's 1020-byte mailbox$/,
    );
    expect(await world.all("sum")).toEqual([2, 2]);
    // a header that fits still moves the data
    expect(await world.all("p2p", 100)).toEqual([
      { text: "resolved", value: 42 },
      { text: "resolved", value: 42 },
    ]);
  });

  it("a mismatch message longer than the mailbox reaches both sides clipped, identical", async () => {
    const [sender, receiver] = await world.all("longMismatch", 400);
    expect(sender).toBe(receiver);
    expect(sender).toMatch(/^CollectiveError: send\/recv mismatch from rank 0 to rank 1: sender offers float32 \[1, 1, .*\.\.\.$/);
    expect(await world.all("sum")).toEqual([2, 2]);
  });

  it("a collective header over its slot rejects on every rank with the same message naming the ranks", async () => {
    const [a, b] = await world.all("allReduce", 1000);
    expect(a!.text).toBe(b!.text);
    expect(a!.text).toMatch(
      /allReduce \(call \d+ on group of world ranks \[0, 1\]\): rank 0: the call header of \d+ bytes does not fit the threads backend's 1148-byte header slot; rank 1: /,
    );
    expect(await world.all("sum")).toEqual([2, 2]);
  });
});
