/**
 * Whether the mpi backend can run on this machine, for tests and tools that
 * would start it under mpirun: `mpirun` on PATH AND the addon loadable. The
 * addon is loaded in a child node process, so the caller never maps libmpi.
 * Outside CI an unusable backend is a skip with a note that names what to
 * install or the command that builds the addon; in CI (which installs OpenMPI
 * before the tests) it is an error, so a broken setup cannot pass as skipped.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { ADDON_PATH, INSTALL_HINT, mpirunAvailable } from "./addon.js";
import { MpiError } from "./errors.js";

/** The command that builds (or rebuilds) the addon inside this repository. */
export const BUILD_ADDON_COMMAND = "pnpm --filter @ulysses/collectives-mpi build:addon";

export interface MpiProbeOptions {
  /** Whether mpirun is on PATH (default: probe it). */
  mpirun?: boolean;
  /** The addon to load (default: this package's build/Release/ulysses_mpi.node). */
  addonPath?: string;
}

const loadable = new Map<string, string | null>();

/** null when `path` loads in a fresh node process (RTLD_NOW | RTLD_GLOBAL, as loadAddon does), else why not. */
function addonLoadError(path: string): string | null {
  const cached = loadable.get(path);
  if (cached !== undefined) return cached;
  const script = `const { constants } = require("node:os"); process.dlopen({ exports: {} }, process.argv[1], constants.dlopen.RTLD_NOW | constants.dlopen.RTLD_GLOBAL);`;
  const probe = spawnSync(process.execPath, ["-e", script, path], { encoding: "utf8", env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" } });
  const error = probe.error
    ? probe.error.message
    : probe.status === 0
      ? null
      : (probe.stderr.split("\n").find((l) => /Error/.test(l)) ?? `exit ${probe.status}`).trim();
  loadable.set(path, error);
  return error;
}

/** null when the mpi backend is usable here (mpirun on PATH and the addon loadable), else the reason and the fix. */
export function mpiUnusableReason(options: MpiProbeOptions = {}): string | null {
  const path = options.addonPath ?? ADDON_PATH;
  if (!(options.mpirun ?? mpirunAvailable())) return `mpirun is not on PATH; ${INSTALL_HINT}`;
  if (!existsSync(path)) return `mpirun is on PATH but the MPI addon ${path} was not built; build it with \`${BUILD_ADDON_COMMAND}\``;
  const error = addonLoadError(path);
  if (error !== null) return `mpirun is on PATH but the MPI addon ${path} does not load (${error}); rebuild it with \`${BUILD_ADDON_COMMAND}\``;
  return null;
}

/** True when the environment says this is CI (CI set to anything but "", "0" or "false"). */
export function isCi(env: NodeJS.ProcessEnv = process.env): boolean {
  const value = env.CI?.trim().toLowerCase();
  return value !== undefined && value !== "" && value !== "0" && value !== "false";
}

/**
 * The skip decision for a test that needs the mpi backend: null when it can run; outside CI a note
 * ("skipped: <reason>") to print and put in the test's title; in CI an MpiError naming the reason.
 */
export function mpiTestSkipNote(options: MpiProbeOptions & { ci?: boolean } = {}): string | null {
  const reason = mpiUnusableReason(options);
  if (reason === null) return null;
  if (options.ci ?? isCi()) throw new MpiError(`CI is set, so the mpi backend tests must run, but the backend is unusable: ${reason}`);
  return `skipped: ${reason}`;
}
