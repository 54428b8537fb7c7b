import { describe, expect, it } from "vitest";
import { join } from "node:path";
import { addonBuilt, ADDON_PATH, INSTALL_HINT, mpirunAvailable } from "./addon.js";
import { FIXTURES, markedLines, spawnMpirun } from "./testing-fixtures/spawn-mpirun.js";

interface CheckReport {
  rank: number;
  size: number;
  reduction: string;
  passed: number;
  failed: number;
  failures: string[];
}

interface ConformanceReport {
  rank: number;
  size: number;
  results: { name: string; status: "passed" | "failed" | "skipped"; error?: string }[];
}

const hasMpirun = mpirunAvailable();
// With mpirun on PATH the install step builds the addon; only a machine
// without MPI may skip (CI installs MPI, so there these tests always run).
const skipReason = !hasMpirun ? `mpirun not found; ${INSTALL_HINT}` : !addonBuilt() && !process.env.CI ? `addon not built (${ADDON_PATH}); ${INSTALL_HINT}` : null;
if (skipReason) console.warn(`skipping the mpi backend tests: ${skipReason}`);

describe.skipIf(skipReason !== null)("mpi backend under mpirun", () => {
  const cases: [number, string][] = [
    [2, "ordered"],
    [4, "ordered"],
    [2, "mpi"],
  ];
  it.each(cases)("np %i, reduction %s: our checks and the shared conformance suite pass on every rank", async (np, reduction) => {
    const run = await spawnMpirun(np, join(FIXTURES, "rank-checks.ts"), [reduction], 110_000);
    const reports = markedLines<CheckReport>(run.stdout, "ULYSSES_CHECKS");
    const context = `exit ${run.code} after ${Math.round(run.ms)} ms\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`;
    expect(reports.map((r) => r.rank).sort(), context).toEqual(Array.from({ length: np }, (_, r) => r));
    for (const report of reports) {
      expect(report.failures, `rank ${report.rank}`).toEqual([]);
      expect(report.passed).toBe(10);
      expect(report.size).toBe(np);
    }
    const conformance = markedLines<ConformanceReport>(run.stdout, "ULYSSES_CONFORMANCE");
    expect(conformance.map((r) => r.rank).sort(), context).toEqual(Array.from({ length: np }, (_, r) => r));
    for (const report of conformance) {
      const failed = report.results.filter((c) => c.status === "failed").map((c) => `${c.name}: ${c.error}`);
      expect(failed, `rank ${report.rank}`).toEqual([]);
      expect(report.results.filter((c) => c.status === "passed").length, `rank ${report.rank}`).toBeGreaterThanOrEqual(20);
    }
    expect(run.code, context).toBe(0);
  }, 120_000);

  it("a rank that throws ends the job at once, non-zero, with stderr naming the rank and its error", async () => {
    const run = await spawnMpirun(2, join(FIXTURES, "rank-fails.ts"), ["throw"], 60_000);
    expect(run.killed, "mpirun hung").toBe(false);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toContain("deliberate failure on rank 1");
    expect(run.stderr).toMatch(/\[ulysses mpi\] rank 1 \(pid \d+ on [^)]+\) is exiting with an error \(exit code 1\): aborting the MPI job/);
    expect(run.stdout).not.toContain("finished without noticing");
  }, 70_000);

  it("a rank that stops calling makes its peers time out, and the job ends non-zero", async () => {
    const run = await spawnMpirun(2, join(FIXTURES, "rank-fails.ts"), ["timeout"], 60_000);
    expect(run.killed, "mpirun hung").toBe(false);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toContain("rank 0: barrier (header exchange) on group of world ranks [0, 1] did not complete within 500 ms");
    expect(run.stdout).not.toContain("finished without noticing");
  }, 70_000);
});
