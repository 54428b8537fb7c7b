#!/usr/bin/env node
// Packs every publishable workspace package (each one pnpm-workspace.yaml
// lists whose package.json is not "private") into one folder, with
// `pnpm pack` (its prepack step builds dist/). The README's "Using the
// packages in your own project" runs this, and so does the consumer check
// (scripts/consumer/check.sh), so the two cannot list different packages.
//
// Usage: node scripts/pack-packages.mjs DEST   (DEST is created if missing)
// Plain Node, no dependencies; pnpm is run as `npx -y pnpm@12.4.2`.
import { spawnSync } from "node:child_process";
import { mkdirSync, realpathSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { workspacePackages } from "./workspace.mjs";

const PNPM = ["-y", "pnpm@12.4.2"];

/** The workspace packages a user installs: every one that is not private, sorted by folder. */
export function publishablePackages(root) {
  return workspacePackages(root).filter((p) => p.manifest.private !== true);
}

function main() {
  const dest = process.argv[2];
  if (dest === undefined || dest === "" || process.argv.length > 3) {
    process.stderr.write("usage: node scripts/pack-packages.mjs DEST\n");
    process.exit(2);
  }
  const root = dirname(dirname(fileURLToPath(import.meta.url)));
  const out = resolve(dest);
  mkdirSync(out, { recursive: true });
  const packages = publishablePackages(root);
  for (const p of packages) {
    const run = spawnSync("npx", [...PNPM, "pack", "--pack-destination", out], {
      cwd: p.absoluteDir,
      encoding: "utf8",
      env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" },
    });
    if (run.status !== 0) {
      process.stderr.write(`${run.stdout}${run.stderr}pack-packages: pnpm pack failed in ${p.dir} (exit ${run.status})\n`);
      process.exit(1);
    }
    process.stdout.write(`packed ${p.name} (${p.dir})\n`);
  }
  process.stdout.write(`pack-packages: ${packages.length} tarballs in ${out}\n`);
}

if (process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) main();
