/**
 * A setup file of every test project (vitest.shared.ts): each test file runs
 * with its own temporary directory as TMPDIR, which os.tmpdir() and every
 * process a test starts (trainers, mpirun) read, and the directory goes with
 * everything in it once the file's tests are done. A test run leaves nothing
 * in the system's temporary directory, whatever its files forget to remove.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll } from "vitest";

// The system's directory, kept apart from TMPDIR: a worker that runs a second file has TMPDIR set to the first's (removed).
process.env.ULYSSES_TEST_TMPDIR_BASE ??= os.tmpdir();
const dir = fs.mkdtempSync(path.join(process.env.ULYSSES_TEST_TMPDIR_BASE, "ulysses-test-"));
process.env.TMPDIR = dir;

afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});
