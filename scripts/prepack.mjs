#!/usr/bin/env node
// The `prepack` script of every publishable package (packages/*, apps/trainer), run by
// `pnpm pack` and `pnpm publish` from the package folder:
//
//   node ../../scripts/prepack.mjs [extra required files...]
//
// 1. removes dist/ (so no stale file, e.g. an old benchmark, is packed; the
//    build info, dist/tsconfig.build.tsbuildinfo, goes with it);
// 2. builds it with `tsc --build tsconfig.build.json` (TypeScript resolved from
//    the package folder, as the package's `build` script finds it), which
//    first builds the workspace packages it references when they are not up
//    to date, so a package packs on a fresh clone without `pnpm build`;
// 3. fails, naming the files, when any file the published exports map or the
//    bin map points at (dist/index.js and dist/index.d.ts for a package with a
//    "." export), or an extra file given on the command line is missing, or
//    when dist holds a test or a benchmark, or when a dist/*.d.ts imports a
//    relative path outside dist (another package's or this package's src/:
//    declarations must name other packages by their package names only).
//
// The build info is never packed: `files` says "!dist/*.tsbuildinfo".
//
// It leaves the native addons alone: they are built at install time by the
// native packages' own install scripts.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, relative, resolve, sep } from "node:path";

const packageDir = process.cwd();
const manifest = JSON.parse(readFileSync(join(packageDir, "package.json"), "utf8"));
const tag = `${manifest.name ?? packageDir} prepack`;

function fail(message) {
  console.error(`${tag}: ${message}`);
  console.error(`${tag}: nothing was packed; fix the build (npx -y pnpm@12.4.2 --filter ${manifest.name} build) and pack again.`);
  process.exit(1);
}

rmSync(join(packageDir, "dist"), { recursive: true, force: true });

let tsc;
try {
  tsc = createRequire(join(packageDir, "package.json")).resolve("typescript/bin/tsc");
} catch (cause) {
  fail(`cannot find TypeScript from ${packageDir} (${cause.message}); run pnpm install at the repository root`);
}
const build = spawnSync(process.execPath, [tsc, "--build", "tsconfig.build.json"], { cwd: packageDir, stdio: "inherit" });
if (build.status !== 0) fail(`tsc --build tsconfig.build.json exited ${build.status ?? build.signal}`);

/** Every file path an exports map names (conditions other than "@ulysses/source"; no patterns). */
function exportTargets(entry) {
  if (typeof entry === "string") return entry.includes("*") ? [] : [entry];
  if (entry === null || typeof entry !== "object") return [];
  return Object.entries(entry).flatMap(([key, value]) => (key === "@ulysses/source" ? [] : exportTargets(value)));
}

const exportsMap = manifest.publishConfig?.exports ?? manifest.exports ?? {};
const bins = typeof manifest.bin === "string" ? [manifest.bin] : Object.values(manifest.bin ?? {});
const required = new Set([
  ...(exportsMap["."] ? ["./dist/index.js", "./dist/index.d.ts"] : []),
  ...exportTargets(exportsMap),
  ...bins.map((b) => (b.startsWith("./") ? b : `./${b}`)),
]);
for (const extra of process.argv.slice(2)) required.add(extra.startsWith("./") ? extra : `./${extra}`);
const missing = [...required].filter((file) => !existsSync(resolve(packageDir, file)));
if (missing.length > 0) fail(`after tsc --build tsconfig.build.json these files are missing: ${missing.join(", ")}`);

function walk(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    return entry.isDirectory() ? walk(path) : [path];
  });
}
const unwanted = walk(join(packageDir, "dist"))
  .map((file) => relative(packageDir, file))
  .filter((file) => /\.test\.|(^|[/-])bench(\.|[/-])|testing-fixtures/.test(file));
if (unwanted.length > 0) fail(`dist holds tests, fixtures or benchmarks (exclude them in tsconfig.build.json): ${unwanted.join(", ")}`);

const distDir = join(packageDir, "dist");
const escaping = walk(distDir)
  .filter((file) => file.endsWith(".d.ts"))
  .flatMap((file) =>
    [...readFileSync(file, "utf8").matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)["']([^"']+)["']/gm)]
      .map((match) => match[1])
      .filter((specifier) => specifier.startsWith(".") && !resolve(dirname(file), specifier).startsWith(distDir + sep))
      .map((specifier) => `${relative(packageDir, file)} imports '${specifier}'`),
  );
if (escaping.length > 0) fail(`declarations reach outside dist (build with tsconfig.build.base.json's customConditions []): ${escaping.join(", ")}`);

console.log(`${tag}: dist built; ${required.size} required files present`);
