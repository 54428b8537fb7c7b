#!/usr/bin/env node
// Builds the ulysses_mpi addon with node-gyp when an MPI compiler wrapper
// (mpicc) is on PATH. Runs as the package's `install` script: without MPI it
// prints how to get it and exits 0, so every other package still installs;
// the backend then reports the same hint when asked for. With MPI present a
// failed build fails the install (the error would otherwise surface later).
// Pass --force to rebuild even when the addon is newer than its sources.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, rmSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const addonPath = join(packageDir, "build", "Release", "ulysses_mpi.node");
const force = process.argv.includes("--force");
// How to rerun this script, for both places the package lives: a project that
// installed it from the registry, and this repository's workspace.
const hint =
  "install OpenMPI with: apt-get install -y openmpi-bin libopenmpi-dev, then rebuild the addon: " +
  "in a project that installed @ulysses/collectives-mpi, `npm rebuild @ulysses/collectives-mpi` " +
  "(pnpm: `pnpm rebuild @ulysses/collectives-mpi`, with the package listed in pnpm's allowBuilds) or " +
  "`node node_modules/@ulysses/collectives-mpi/scripts/build-addon.mjs --force`; " +
  "inside the ulysses-ts repository, `pnpm --filter @ulysses/collectives-mpi build:addon`";

const probe = spawnSync("mpicc", ["--showme:compile"], { encoding: "utf8" });
if (probe.error || probe.status !== 0) {
  console.log(`@ulysses/collectives-mpi: mpicc not found, skipping the MPI addon build; ${hint}`);
  process.exit(0);
}

function newestSource() {
  const files = [join(packageDir, "binding.gyp"), ...readdirSync(join(packageDir, "native")).map((f) => join(packageDir, "native", f))];
  return Math.max(...files.map((f) => statSync(f).mtimeMs));
}

const upToDate = () => existsSync(addonPath) && statSync(addonPath).mtimeMs > newestSource();
if (!force && upToDate()) {
  console.log(`@ulysses/collectives-mpi: addon up to date (${addonPath})`);
  process.exit(0);
}

// Several installs may run this at once in one checkout: build one at a time
// (a directory as the lock; one older than 10 minutes is taken as stale).
const lock = join(packageDir, "build", ".build-lock");
mkdirSync(join(packageDir, "build"), { recursive: true });
for (;;) {
  try {
    mkdirSync(lock);
    break;
  } catch {
    if (Date.now() - statSync(lock, { throwIfNoEntry: false })?.mtimeMs > 600_000) rmSync(lock, { recursive: true, force: true });
    else await new Promise((resolve) => setTimeout(resolve, 500));
  }
}
process.on("exit", () => rmSync(lock, { recursive: true, force: true }));
if (!force && upToDate()) {
  console.log(`@ulysses/collectives-mpi: addon up to date (built by a concurrent install)`);
  process.exit(0);
}

// node-gyp downloads Node's headers unless told where they are: use the ones
// installed next to this node binary (e.g. /usr/include/node) when present.
// configure + build (not rebuild): the old addon stays in place until make replaces it.
const args = [];
const nodePrefix = resolve(dirname(process.execPath), "..");
if (existsSync(join(nodePrefix, "include", "node", "node_api.h"))) args.push(`--nodedir=${nodePrefix}`);

// node-gyp is a dependency of this package: resolved from the package folder,
// it is found in the package's own node_modules (pnpm) or in a parent one
// (npm's hoisted layout in a consumer's node_modules).
const require = createRequire(import.meta.url);
let gyp;
try {
  gyp = require.resolve("node-gyp/bin/node-gyp.js");
} catch (error) {
  console.error(
    `@ulysses/collectives-mpi: node-gyp could not be resolved from ${packageDir} (${error.message.split("\n")[0]}); reinstall the package's dependencies; ${hint}`,
  );
  process.exit(1);
}
const gypEnv = { ...process.env, ORT_DISABLE_TELEMETRY: "1" };
let build = spawnSync(process.execPath, [gyp, "configure", ...args], { cwd: packageDir, stdio: "inherit", env: gypEnv });
if (build.status === 0) build = spawnSync(process.execPath, [gyp, "build", ...args], { cwd: packageDir, stdio: "inherit", env: gypEnv });
if (build.status !== 0) {
  console.error(`@ulysses/collectives-mpi: building the MPI addon failed (node-gyp configure/build ${args.join(" ")} exited ${build.status}); ${hint}`);
  process.exit(build.status ?? 1);
}
console.log(`@ulysses/collectives-mpi: built ${addonPath}`);
