#!/usr/bin/env node
// Runs the example of every package README: the first ```ts block under its
// "## Example" heading, written next to the package's package.json (so the
// package's own name and its dependencies resolve as they do for its tests)
// and run with node + tsx under the @ulysses/source condition. A README
// without an "## Example" section fails the check: every package shows its
// public API in a short runnable example.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const dirs = ["packages", "apps"].flatMap((parent) =>
  fs
    .readdirSync(path.join(root, parent))
    .map((name) => path.join(parent, name))
    .filter((dir) => fs.existsSync(path.join(root, dir, "package.json"))),
);
const tsx = import.meta.resolve("tsx");
const only = process.argv.slice(2);
let failed = 0;
for (const dir of dirs) {
  if (only.length > 0 && !only.some((o) => dir.endsWith(o))) continue;
  const readme = path.join(root, dir, "README.md");
  const text = fs.existsSync(readme) ? fs.readFileSync(readme, "utf8") : "";
  const section = text.split(/^## /m).find((part) => part.startsWith("Example"));
  const code = section?.match(/```ts\n([\s\S]*?)```/)?.[1];
  if (code === undefined) {
    console.log(`readme-examples: ${dir}/README.md has no "## Example" section with a \`\`\`ts block`);
    failed++;
    continue;
  }
  const file = path.join(root, dir, ".readme-example.ts");
  const scratch = fs.mkdtempSync(path.join(fs.realpathSync(os.tmpdir()), "readme-example-"));
  fs.writeFileSync(file, code);
  const started = Date.now();
  const run = spawnSync(process.execPath, ["--conditions=@ulysses/source", "--import", tsx, file], {
    cwd: scratch,
    env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" },
    encoding: "utf8",
    timeout: 120_000,
  });
  fs.rmSync(file, { force: true });
  fs.rmSync(scratch, { recursive: true, force: true });
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  if (run.status === 0) {
    console.log(`readme-examples: ${dir} ok (${seconds} s)`);
  } else {
    failed++;
    console.log(`readme-examples: ${dir} FAILED (exit ${run.status ?? run.signal}):\n${(run.stderr || run.stdout).split("\n").slice(0, 20).join("\n")}`);
  }
}
if (failed > 0) {
  console.log(`readme-examples: ${failed} failed`);
  process.exit(1);
}
