/**
 * setMallocMmapThreshold and setMallocTrimThreshold change glibc's malloc for
 * the whole process, so each case runs in a child process. The child
 * allocates, touches and frees a 16 MiB buffer ten times and reports the
 * minor page faults of the last nine rounds: with large buffers on mmap
 * (threshold 128 KiB) every round faults its 4096 pages in anew; with the
 * heap kept (threshold 32 MiB, trim threshold at its maximum) the rounds
 * reuse the first round's pages.
 */
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { FusedAttentionError, fusedAttentionStatus, MALLOC_MMAP_THRESHOLD_MAX, setMallocMmapThreshold, setMallocTrimThreshold } from "./index.js";

const status = fusedAttentionStatus();
const glibc =
  process.platform === "linux" &&
  Boolean((process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header?.glibcVersionRuntime);

const script = (setup: string) => `
import { MALLOC_MMAP_THRESHOLD_MAX, setMallocMmapThreshold, setMallocTrimThreshold } from "@ulysses/native-ops";
const applied = ${setup};
const faults = () => process.resourceUsage().minorPageFault;
let before = 0;
for (let round = 0; round < 10; round++) {
  if (round === 1) before = faults();
  let buffer = new Float64Array(2 * 1024 * 1024);
  buffer.fill(round);
  buffer = null;
  globalThis.gc();
}
console.log(JSON.stringify({ applied, faults: faults() - before }));
`;

function faultsWith(setup: string): { applied: boolean; faults: number } {
  const run = spawnSync(process.execPath, ["--expose-gc", "--conditions=@ulysses/source", "--import", "tsx", "--input-type=module", "-e", script(setup)], {
    cwd: fileURLToPath(new URL("..", import.meta.url)),
    env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" },
    encoding: "utf8",
  });
  expect(run.status, run.stderr).toBe(0);
  return JSON.parse(run.stdout.trim().split("\n").at(-1)!) as { applied: boolean; faults: number };
}

describe("glibc malloc settings", () => {
  it("refuses a size out of range, naming it", () => {
    expect(() => setMallocTrimThreshold(100)).toThrow(FusedAttentionError);
    expect(() => setMallocTrimThreshold(100)).toThrow(/setMallocTrimThreshold: bytes must be an integer in \[4096, 2147483647\], got 100/);
    expect(() => setMallocTrimThreshold(2 ** 31)).toThrow(/got 2147483648/);
    expect(() => setMallocTrimThreshold(5000.5)).toThrow(/got 5000.5/);
    expect(() => setMallocMmapThreshold(MALLOC_MMAP_THRESHOLD_MAX + 1)).toThrow(
      /setMallocMmapThreshold: bytes must be an integer in \[4096, 33554432\], got 33554433/,
    );
  });

  it.skipIf(!status.available || !glibc)("keeps freed large buffers for reuse instead of faulting them in again", () => {
    const onMmap = faultsWith("setMallocMmapThreshold(128 * 1024)");
    const kept = faultsWith("setMallocMmapThreshold(MALLOC_MMAP_THRESHOLD_MAX) && setMallocTrimThreshold(2 ** 31 - 1)");
    expect(onMmap.applied).toBe(true);
    expect(kept.applied).toBe(true);
    // 9 rounds of 4096 pages each
    expect(onMmap.faults).toBeGreaterThan(9 * 4096 * 0.9);
    expect(kept.faults).toBeLessThan(onMmap.faults / 4);
  });
});
