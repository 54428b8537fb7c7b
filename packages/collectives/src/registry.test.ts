import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { CollectiveError } from "./errors.js";
import { createLocalGroups } from "./local/local-group.js";
import { getBackend, init, listBackends, registerBackend } from "./registry.js";
import { describeConformance } from "./testing/vitest.js";
import { RecordingGroup } from "./testing-fixtures/recording-backend.js";
import { launch } from "./threads/launch.js";

const fixture = (name: string) => fileURLToPath(new URL(`./testing-fixtures/${name}`, import.meta.url));

describe("backend registry", () => {
  it("registers by name once, and rejects a second registration naming it", () => {
    const factory = async () => createLocalGroups(1)[0]!;
    registerBackend("test-once", factory);
    expect(getBackend("test-once")).toBe(factory);
    expect(listBackends()).toEqual(expect.arrayContaining(["threads", "test-once"]));
    expect(() => registerBackend("test-once", factory)).toThrow(new CollectiveError("registerBackend: a backend named 'test-once' is already registered"));
  });

  it("init picks a registered backend, or loads a module path and registers it under that path", async () => {
    const solo = await init({ backend: "threads" });
    expect([solo.backend, solo.rank, solo.size]).toEqual(["threads", 0, 1]);
    const t = Float32Array.from([1, 2]);
    await solo.allReduce(t, { op: "mean" });
    expect(Array.from(t)).toEqual([1, 2]);
    const path = fixture("recording-backend.ts");
    const recorded = await init({ backend: path });
    expect(recorded.backend).toBe("recording");
    expect(getBackend(path)).toBeTypeOf("function");
    await recorded.barrier();
    expect((recorded as RecordingGroup).calls).toEqual(["barrier"]);
    await expect(init({ backend: "no-such-backend" })).rejects.toThrow(/unknown backend 'no-such-backend'; registered: threads/);
  });
});

// A user-defined backend, wrapping the reference backend in-process, passes the suite.
describeConformance("user backend (recording over local), in-process", (size) => createLocalGroups(size).map((g) => new RecordingGroup(g)), { sizes: [3] });

// The same backend registered by name inside worker ranks (the entry registers it), launched with backend: "recording".
describeConformance(
  "user backend (recording over threads), registered by name and launched",
  async (worldSize) => {
    const world = await launch<{ run(names: string[]): Promise<never>; recorded(): { backend: string; calls: number } }>({
      worldSize,
      entry: fixture("recording-entry.ts"),
      backend: "recording",
    });
    return {
      async run(names) {
        const results = await world.all("run", [...names]);
        const recorded = await world.all("recorded");
        if (recorded.some((r) => r.backend !== "recording" || r.calls === 0))
          throw new Error(`the recording backend was not used: ${JSON.stringify(recorded)}`);
        return results;
      },
      close: () => world.shutdown(),
    };
  },
  { sizes: [2] },
);
