import { describe, expect, it } from "vitest";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { mpiTestSkipNote } from "./availability.js";
import { FIXTURES, spawnMpirun } from "./testing-fixtures/spawn-mpirun.js";
import { CONFORMANCE_CHECKS } from "@ulysses/collectives/testing";

interface CheckReport {
  rank: number;
  size: number;
  reduction: string;
  passed: number;
  failed: number;
  failures: string[];
}

interface ConformanceLine {
  rank: number;
  size: number;
  result: { name: string; status: "passed" | "failed" | "skipped"; error?: string };
}

// Outside CI, a machine without mpirun or without a loadable addon skips with a
// note saying what to install or run; CI installs MPI, so there it is an error.
const skipNote = mpiTestSkipNote();
if (skipNote) console.warn(`the mpi backend tests ${skipNote}`);

describe.skipIf(skipNote !== null)("mpi backend under mpirun", () => {
  const cases: [number, string][] = [
    [2, "ordered"],
    [4, "ordered"],
    [2, "mpi"],
  ];
  it.each(cases)(
    "np %i, reduction %s: our checks and the shared conformance suite pass on every rank",
    async (np, reduction) => {
      const dir = mkdtempSync(join(tmpdir(), "ulysses-mpi-checks-"));
      const run = await spawnMpirun(np, join(FIXTURES, "rank-checks.ts"), [reduction, dir], 110_000);
      // one file per rank and kind (mpirun would interleave the ranks' stdout mid-line)
      const linesOf = <T>(name: string): T[] =>
        readdirSync(dir)
          .filter((f) => f.startsWith(`${name}-`))
          .flatMap((f) =>
            readFileSync(join(dir, f), "utf8")
              .split("\n")
              .filter((l) => l)
              .map((l) => JSON.parse(l) as T),
          );
      const reports = linesOf<CheckReport>("ULYSSES_CHECKS");
      const context = `exit ${run.code} after ${Math.round(run.ms)} ms\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`;
      expect(reports.map((r) => r.rank).sort(), context).toEqual(Array.from({ length: np }, (_, r) => r));
      for (const report of reports) {
        expect(report.failures, `rank ${report.rank}`).toEqual([]);
        expect(report.passed).toBe(10);
        expect(report.size).toBe(np);
      }
      const lines = linesOf<ConformanceLine>("ULYSSES_CONFORMANCE");
      rmSync(dir, { recursive: true, force: true });
      const checks = CONFORMANCE_CHECKS.length;
      for (let rank = 0; rank < np; rank++) {
        const results = lines.filter((l) => l.rank === rank).map((l) => l.result);
        expect(results.length, `rank ${rank}: conformance results\n${context}`).toBe(checks);
        const failed = results.filter((c) => c.status === "failed").map((c) => `${c.name}: ${c.error}`);
        expect(failed, `rank ${rank}`).toEqual([]);
        expect(results.filter((c) => c.status === "passed").length, `rank ${rank}`).toBeGreaterThanOrEqual(100);
      }
      expect(run.code, context).toBe(0);
    },
    120_000,
  );

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

  it.each([
    ["world", "drain"],
    ["sub", "drain"],
    ["world", "exit"],
  ])(
    "a timed-out operation on the %s group, then destroy() and exit (%s): destroy resolves, the job ends non-zero naming the rank and the timeout, no native crash",
    async (mode, end) => {
      const run = await spawnMpirun(2, join(FIXTURES, "rank-destroy-after-timeout.ts"), [mode, end], 60_000);
      const context = `exit ${run.code} after ${Math.round(run.ms)} ms\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`;
      expect(run.killed, `mpirun hung\n${context}`).toBe(false);
      expect(run.code, context).not.toBe(0);
      expect(run.stdout, context).toContain("ULYSSES_TIMEOUT rank 0: MpiError: rank 0: barrier (header exchange)");
      if (mode === "sub") expect(run.stdout, context).toContain("ULYSSES_DESTROY rank 0 sub-group: resolved");
      expect(run.stdout, context).toContain("ULYSSES_DESTROY rank 0 world: resolved");
      expect(run.stderr, context).toMatch(
        /\[ulysses mpi\] rank 0 \(pid \d+ on [^)]+\) is exiting with 1 MPI operation\(s\) still running after a failed operation \(rank 0: barrier .*did not complete within 500 ms/,
      );
      expect(run.stderr, context).not.toMatch(/terminate called|Segmentation fault|backtrace|\*\*\* Process received signal/i);
      expect(run.ms, context).toBeLessThan(20_000);
    },
    70_000,
  );
});
