// Tests of scripts/check-imports.mjs and scripts/check-references.mjs on the
// fixture trees of scripts/testing-fixtures (each a small workspace: a
// contributing/README.md with a deps block, package.json files, sources,
// tsconfigs). Plain node:test, run by .ci/run:
//
//   node --test scripts/checks.test.mjs
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { importsOf } from "./check-imports.mjs";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
const fixtures = join(here, "testing-fixtures");

function run(script, root, ...extra) {
  const result = spawnSync(process.execPath, [join(here, script), "--root", root, ...extra], { encoding: "utf8" });
  const lines = result.stderr.split("\n").filter((line) => line !== "" && !/^check-(imports|references): \d+ (violation|problem)/.test(line));
  return { status: result.status, lines, stdout: result.stdout };
}

test("check-imports passes a tree that keeps to its deps block (type-only, tests, fixtures, comments, strings, *)", () => {
  const { status, lines, stdout } = run("check-imports.mjs", join(fixtures, "imports/good"));
  assert.deepEqual(lines, []);
  assert.equal(status, 0);
  assert.match(stdout, /6 packages import only what/);
});

test("check-imports reports every kind of violation, one line each", () => {
  const { status, lines } = run("check-imports.mjs", join(fixtures, "imports/bad"));
  assert.equal(status, 1);
  assert.deepEqual(lines.sort(), [
    "contributing/README.md: the deps block has no line for model (packages/model)",
    "contributing/README.md:15: the deps block names ghost, which is no workspace package",
    "contributing/README.md:16: tools may import phantom, which is no workspace package",
    "packages/block/package.json: dependencies lists @ulysses/collectives, allowed: kernels, tensors",
    "packages/block/src/index.ts:2 imports ../../tensors/src/index.js, which leaves packages/block (import @ulysses/tensors by name)",
    "packages/block/src/index.ts:4 imports @ulysses/model, allowed: kernels, tensors",
    "packages/block/src/index.ts:4 imports @ulysses/model, and packages/block/package.json does not list it in dependencies",
    "packages/block/src/index.ts:5 imports @ulysses/collectives, allowed: kernels, tensors",
    "packages/kernels/src/index.ts:2 imports @ulysses/collectives, allowed: tensors",
    "packages/kernels/src/index.ts:2 imports @ulysses/collectives, and packages/kernels/package.json lists it only in devDependencies",
    "packages/kernels/src/kernels.test.ts:1 imports @ulysses/block, and packages/kernels/package.json does not list it (dependencies or devDependencies)",
    "packages/measure/src/index.ts:2 imports @ulysses/collectives (a value import; only import type is allowed), allowed: tensors, type:collectives",
    "tools/bench/src/bench.ts:1 imports @ulysses/nowhere, and @ulysses/nowhere is no workspace package",
  ]);
});

test("check-imports refuses a deps block with a cycle, and a README without one", () => {
  const cycle = run("check-imports.mjs", join(fixtures, "imports/cycle"));
  assert.equal(cycle.status, 1);
  assert.deepEqual(cycle.lines, ["contributing/README.md: the deps block has a cycle: tensors -> kernels -> block -> tensors"]);
  const none = run("check-imports.mjs", join(fixtures, "imports/no-block"));
  assert.equal(none.status, 1);
  assert.deepEqual(none.lines, ['contributing/README.md: no ```deps block under "## The package graph"']);
});

test("the import scanner finds every import form and nothing in comments, strings, templates or regular expressions", () => {
  const source = [
    'import a, { b, type C } from "@ulysses/one";',
    "import type { D } from '@ulysses/two';",
    'import "@ulysses/side";',
    'export { f } from "@ulysses/four/sub";',
    'export type { G } from "@ulysses/five";',
    "export { local }",
    'import { h } from "@ulysses/seven";',
    '// import x from "@ulysses/comment";',
    'const re = /import x from "@ulysses\\/regex"/g, ratio = a / b / 2;',
    "const s = \"import y from '@ulysses/string'\";",
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the fixture is source text holding a template literal
    'const t = `import z from "@ulysses/template" ${await import("@ulysses/eight")}`;',
    'import("@ulysses/ten").then((x) => x);',
    'type T = import("@ulysses/eleven").Foo;',
    'const r = import.meta.resolve("@ulysses/thirteen"), q = require.resolve("@ulysses/fourteen");',
  ].join("\n");
  assert.deepEqual(
    importsOf(source).map(({ specifier, line, typeOnly }) => `${line} ${specifier}${typeOnly ? " (type)" : ""}`),
    [
      "1 @ulysses/one",
      "2 @ulysses/two (type)",
      "3 @ulysses/side",
      "4 @ulysses/four/sub",
      "5 @ulysses/five (type)",
      "7 @ulysses/seven",
      "11 @ulysses/eight",
      "12 @ulysses/ten",
      "13 @ulysses/eleven (type)",
      "14 @ulysses/thirteen",
      "14 @ulysses/fourteen",
    ],
  );
});

test("check-references passes references that match package.json", () => {
  const { status, lines, stdout } = run("check-references.mjs", join(fixtures, "references/good"));
  assert.deepEqual(lines, []);
  assert.equal(status, 0);
  assert.match(stdout, /3 emitting packages/);
});

test("check-references reports stale references, and --fix rewrites them from package.json", () => {
  const stale = run("check-references.mjs", join(fixtures, "references/stale"));
  assert.equal(stale.status, 1);
  assert.deepEqual(stale.lines.sort(), [
    "packages/block/tsconfig.build.json: references ../kernels/tsconfig.json, ../model/tsconfig.build.json, which package.json does not depend on (node scripts/check-references.mjs --fix)",
    "packages/block/tsconfig.build.json: references lack ../kernels/tsconfig.build.json, which package.json depends on (node scripts/check-references.mjs --fix)",
    "packages/kernels/tsconfig.build.json: references lack ../tensors/tsconfig.build.json, which package.json depends on (node scripts/check-references.mjs --fix)",
  ]);
  const copy = mkdtempSync(join(tmpdir(), "check-references-"));
  try {
    cpSync(join(fixtures, "references/stale"), copy, { recursive: true });
    const fixed = run("check-references.mjs", copy, "--fix");
    assert.deepEqual(fixed.lines, []);
    assert.equal(fixed.status, 0);
    assert.equal(
      readFileSync(join(copy, "packages/block/tsconfig.build.json"), "utf8"),
      '{\n  "extends": ["./tsconfig.json", "../../tsconfig.build.base.json"],\n  "references": [\n    { "path": "../kernels/tsconfig.build.json" },\n    { "path": "../tensors/tsconfig.build.json" }\n  ]\n}\n',
    );
  } finally {
    rmSync(copy, { recursive: true, force: true });
  }
});

test("check-references reports build scripts, composite, conditions, non-emitting dependencies and typecheck references", () => {
  const { status, lines } = run("check-references.mjs", join(fixtures, "references/bad"));
  assert.equal(status, 1);
  assert.deepEqual(lines.sort(), [
    "packages/kernels/package.json: depends on @ulysses/project (tools/project), which has no build; a package that emits can only depend on packages that emit",
    "packages/kernels/package.json: the build script is 'tsc -p tsconfig.build.json', expected 'tsc --build tsconfig.build.json'",
    "packages/kernels/tsconfig.build.json: customConditions is undefined, expected [] so the build reads other packages' dist/*.d.ts (extend ../../tsconfig.build.base.json)",
    "packages/kernels/tsconfig.build.json: not composite (extend ../../tsconfig.build.base.json)",
    "packages/kernels/tsconfig.build.json: references ../tensors/tsconfig.build.json more than once",
    `tools/bench/tsconfig.json: has references; the type check reads other packages' sources (the "@ulysses/source" condition), and references would make it read their dist (put them in tsconfig.build.json)`,
  ]);
});

test("pack-packages: every @ulysses dependency of a packed package is packed too, and the README's recipe runs it", async () => {
  const { publishablePackages } = await import("./pack-packages.mjs");
  const root = fileURLToPath(new URL("..", import.meta.url));
  const packed = new Set(publishablePackages(root).map((p) => p.name));
  for (const name of ["@ulysses/parallel", "@ulysses/training", "@ulysses/trainer", "@ulysses/tensors"]) assert.ok(packed.has(name), name);
  const missing = [];
  for (const p of publishablePackages(root)) {
    for (const field of ["dependencies", "peerDependencies", "optionalDependencies"]) {
      for (const dep of Object.keys(p.manifest[field] ?? {})) if (dep.startsWith("@ulysses/") && !packed.has(dep)) missing.push(`${p.name} -> ${dep}`);
    }
  }
  assert.deepEqual(missing, []);
  // the README packs with the same script, not a list of its own
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const recipe = readme.slice(readme.indexOf("## Using the packages in your own project"));
  assert.match(recipe, /node scripts\/pack-packages\.mjs \.\.\/ulysses-packs/);
  assert.doesNotMatch(recipe.slice(0, recipe.indexOf("\n## ", 5)), /for p in packages\//);
});

test("check-readme-commands --static: every README sh block is marked run or skip and holds no command that cannot work on a fresh machine", () => {
  const root = fileURLToPath(new URL("..", import.meta.url));
  const run = spawnSync(process.execPath, [join(root, "scripts/check-readme-commands.mjs"), "--static"], { cwd: root, encoding: "utf8" });
  assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
  assert.match(run.stdout, /check-readme-commands: \d+ blocks read, \d+ to run/);
});

test("check-readme-commands finds a bare pnpm, npx without -y, an npm install from the registry and an unknown script", async () => {
  const { shellBlocks, staticProblems } = await import("./check-readme-commands.mjs");
  const text =
    "<!-- readme-check: run -->\n```sh\npnpm train\nnpx pnpm@12.4.2 test\nnpm i @ulysses/trainer\nnpx -y pnpm@12.4.2 trian --help\nnpx -y pnpm@12.4.2 train --help  # fine\n```\n\n```sh\necho unmarked\n```\n";
  const blocks = shellBlocks("X.md", text);
  assert.equal(blocks.length, 2);
  assert.deepEqual(blocks[0].marker, { run: "." });
  assert.equal(blocks[1].marker, null);
  const problems = staticProblems(blocks[0], { train: "x", test: "y" });
  assert.equal(problems.length, 4, problems.join("\n"));
  assert.match(problems.join("\n"), /no global pnpm[\s\S]*without -y[\s\S]*not on the npm registry[\s\S]*'trian' is no script/);
});
