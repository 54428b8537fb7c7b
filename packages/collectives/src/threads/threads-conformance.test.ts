import { fileURLToPath } from "node:url";
import { describeConformance } from "../testing/vitest.js";
import { init } from "../registry.js";
import { launch } from "./launch.js";

const entry = fileURLToPath(new URL("../testing-fixtures/conformance-entry.ts", import.meta.url));

describeConformance(
  "threads backend conformance",
  async (worldSize) => {
    // one rank: the threads backend's in-process single-rank world (no worker needed)
    if (worldSize === 1) return [await init({ backend: "threads" })];
    const world = await launch<{ run(names: string[]): Promise<never> }>({ worldSize, entry, timeoutMs: 20_000 });
    return { run: (names) => world.all("run", [...names]), close: () => world.shutdown() };
  },
  { sizes: [1, 2, 4] },
);
