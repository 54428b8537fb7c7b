#!/usr/bin/env node
// The TypeScript project references agree with package.json (run by .ci/run):
//
//   node scripts/check-references.mjs [--fix] [--root DIR]
//
// For every workspace package with a `build` script (an emitting package):
//   - its build is `tsc --build tsconfig.build.json` (or `tsc -b ...`);
//   - tsconfig.build.json is composite and builds with `customConditions: []`
//     (through tsconfig.build.base.json), so dist/*.d.ts never depend on the
//     "@ulysses/source" condition;
//   - its `references` are exactly one { "path": "../<dir>/tsconfig.build.json" }
//     per @ulysses/* package in dependencies, peerDependencies,
//     optionalDependencies or devDependencies (turbo's `^build` reads the same
//     four fields), and each of those packages emits too.
// For every package: tsconfig.json (the type check of src with its tests,
// which reads other packages' sources through the source condition) has no
// references, since `tsc -p` would then read the referenced packages' dist.
//
// --fix writes the references of every emitting package's tsconfig.build.json
// from package.json (creating the file when missing) and then checks again.
// Exit 1 with one line per problem; 0 when everything agrees.
import { existsSync, writeFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { readJsonc, resolvedCompilerOptions, workspaceDependencies, workspacePackages } from "./workspace.mjs";
import { fileURLToPath } from "node:url";

const args = process.argv.slice(2);
const fix = args.includes("--fix");
const rootIndex = args.indexOf("--root");
const root = resolve(rootIndex >= 0 ? args[rootIndex + 1] : fileURLToPath(new URL("..", import.meta.url)));

const BUILD_SCRIPT = /^tsc (--build|-b) tsconfig\.build\.json$/;
const BUILD_BASE = "tsconfig.build.base.json";

const packages = workspacePackages(root);
const byName = new Map(packages.map((pkg) => [pkg.name, pkg]));
const emits = (pkg) => typeof pkg.manifest.scripts?.build === "string";

/** The references package.json asks for: "../<dir>/tsconfig.build.json" of each emitting dependency, relative to the package, sorted. */
function expectedReferences(pkg) {
  return workspaceDependencies(pkg.manifest)
    .filter((name) => byName.has(name) && emits(byName.get(name)))
    .map((name) =>
      relative(pkg.absoluteDir, join(byName.get(name).absoluteDir, "tsconfig.build.json"))
        .split("\\")
        .join("/"),
    );
}

/** A short array of strings on one line, anything else as JSON.stringify indents it. */
function formatValue(value) {
  const inline = Array.isArray(value) && value.every((item) => typeof item === "string") ? `[${value.map((item) => JSON.stringify(item)).join(", ")}]` : null;
  return inline !== null && inline.length <= 80 ? inline : JSON.stringify(value, null, 2).replace(/\n/g, "\n  ");
}

function writeBuildConfig(pkg) {
  const file = join(pkg.absoluteDir, "tsconfig.build.json");
  const config = existsSync(file) ? readJsonc(file) : { extends: ["./tsconfig.json", relative(pkg.absoluteDir, join(root, BUILD_BASE)).split("\\").join("/")] };
  const references = expectedReferences(pkg);
  const lines = Object.entries({ ...config, references: undefined })
    .filter(([, value]) => value !== undefined)
    .map(([key, value]) => `  ${JSON.stringify(key)}: ${formatValue(value)}`);
  const refs = references.length === 0 ? "[]" : `[\n${references.map((path) => `    { "path": ${JSON.stringify(path)} }`).join(",\n")}\n  ]`;
  lines.push(`  "references": ${refs}`);
  writeFileSync(file, `{\n${lines.join(",\n")}\n}\n`);
}

if (fix) for (const pkg of packages.filter(emits)) writeBuildConfig(pkg);

const problems = [];
for (const pkg of packages) {
  const where = (file) => `${pkg.dir}/${file}`;
  const typecheckConfig = join(pkg.absoluteDir, "tsconfig.json");
  if (existsSync(typecheckConfig) && readJsonc(typecheckConfig).references !== undefined) {
    problems.push(
      `${where("tsconfig.json")}: has references; the type check reads other packages' sources (the "@ulysses/source" condition), and references would make it read their dist (put them in tsconfig.build.json)`,
    );
  }
  if (!emits(pkg)) continue;

  const build = pkg.manifest.scripts.build;
  if (!BUILD_SCRIPT.test(build)) problems.push(`${where("package.json")}: the build script is '${build}', expected 'tsc --build tsconfig.build.json'`);

  const buildConfig = join(pkg.absoluteDir, "tsconfig.build.json");
  if (!existsSync(buildConfig)) {
    problems.push(`${where("tsconfig.build.json")}: missing (node scripts/check-references.mjs --fix writes it)`);
    continue;
  }
  const options = resolvedCompilerOptions(buildConfig);
  if (options.composite !== true) problems.push(`${where("tsconfig.build.json")}: not composite (extend ../../${BUILD_BASE})`);
  if (!Array.isArray(options.customConditions) || options.customConditions.length > 0) {
    problems.push(
      `${where("tsconfig.build.json")}: customConditions is ${JSON.stringify(options.customConditions)}, expected [] so the build reads other packages' dist/*.d.ts (extend ../../${BUILD_BASE})`,
    );
  }

  for (const name of workspaceDependencies(pkg.manifest)) {
    const dependency = byName.get(name);
    if (!dependency) problems.push(`${where("package.json")}: depends on ${name}, which is no workspace package`);
    else if (!emits(dependency))
      problems.push(
        `${where("package.json")}: depends on ${name} (${dependency.dir}), which has no build; a package that emits can only depend on packages that emit`,
      );
  }

  const actual = (readJsonc(buildConfig).references ?? []).map((reference) => {
    const target = resolve(pkg.absoluteDir, reference.path);
    const file = target.endsWith(".json") ? target : join(target, "tsconfig.json");
    return relative(pkg.absoluteDir, file).split("\\").join("/");
  });
  const expected = expectedReferences(pkg);
  const missing = expected.filter((path) => !actual.includes(path));
  const extra = actual.filter((path) => !expected.includes(path));
  const duplicated = actual.filter((path, index) => actual.indexOf(path) !== index);
  const fixHint = "(node scripts/check-references.mjs --fix)";
  if (missing.length > 0) problems.push(`${where("tsconfig.build.json")}: references lack ${missing.join(", ")}, which package.json depends on ${fixHint}`);
  if (extra.length > 0) problems.push(`${where("tsconfig.build.json")}: references ${extra.join(", ")}, which package.json does not depend on ${fixHint}`);
  if (duplicated.length > 0) problems.push(`${where("tsconfig.build.json")}: references ${[...new Set(duplicated)].join(", ")} more than once`);
}

for (const problem of problems) console.error(problem);
if (problems.length > 0) {
  console.error(`check-references: ${problems.length} problem${problems.length === 1 ? "" : "s"}`);
  process.exit(1);
}
console.log(
  `check-references: ${packages.filter(emits).length} emitting packages, references agree with package.json; ${packages.length - packages.filter(emits).length} without a build`,
);
