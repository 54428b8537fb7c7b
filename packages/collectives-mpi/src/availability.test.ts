/**
 * The skip decision of the tests that need the mpi backend: mpirun on PATH
 * with the addon missing or broken skips with a note naming the build command
 * outside CI, and is an error in CI; without mpirun the note names the apt
 * packages. The probes are simulated (mpirun's presence passed in, the addon
 * pointed at a missing or a non-addon file), so these run on every machine.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { BUILD_ADDON_COMMAND, isCi, MpiError, mpiTestSkipNote, mpiUnusableReason } from "./index.js";

const dir = mkdtempSync(join(tmpdir(), "ulysses-mpi-availability-"));
const missing = join(dir, "build", "Release", "ulysses_mpi.node");
const broken = join(dir, "not-an-addon.node");
writeFileSync(broken, "this is not a shared object\n");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("mpi backend availability for tests", () => {
  it("the build command is the one this package's scripts define", () => {
    expect(BUILD_ADDON_COMMAND).toBe("pnpm --filter @ulysses/collectives-mpi build:addon");
  });

  it("mpirun present, addon missing, outside CI: a skip note naming the addon path and the build command", () => {
    const note = mpiTestSkipNote({ mpirun: true, addonPath: missing, ci: false });
    expect(note).not.toBeNull();
    expect(note).toContain("skipped:");
    expect(note).toContain(missing);
    expect(note).toContain("pnpm --filter @ulysses/collectives-mpi build:addon");
  });

  it("mpirun present, addon missing, in CI: an MpiError, not a skip", () => {
    expect(() => mpiTestSkipNote({ mpirun: true, addonPath: missing, ci: true })).toThrow(MpiError);
    expect(() => mpiTestSkipNote({ mpirun: true, addonPath: missing, ci: true })).toThrow(/CI is set.*not built/);
  });

  it("mpirun present, addon file present but not loadable: the load error and the rebuild command", () => {
    const reason = mpiUnusableReason({ mpirun: true, addonPath: broken });
    expect(reason).toContain(broken);
    expect(reason).toContain("does not load");
    expect(reason).toContain("pnpm --filter @ulysses/collectives-mpi build:addon");
    expect(() => mpiTestSkipNote({ mpirun: true, addonPath: broken, ci: true })).toThrow(MpiError);
  });

  it("mpirun missing: the note names the apt packages, and CI still fails", () => {
    expect(mpiTestSkipNote({ mpirun: false, addonPath: missing, ci: false })).toContain("apt-get install -y openmpi-bin libopenmpi-dev");
    expect(() => mpiTestSkipNote({ mpirun: false, addonPath: missing, ci: true })).toThrow(/mpirun is not on PATH/);
  });

  it("CI is read from the environment as GitHub Actions and most CIs set it", () => {
    expect(isCi({ CI: "true" })).toBe(true);
    expect(isCi({ CI: "1" })).toBe(true);
    expect(isCi({})).toBe(false);
    expect(isCi({ CI: "false" })).toBe(false);
    expect(isCi({ CI: "" })).toBe(false);
  });
});
