import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { defineConfig, type TestProjectConfiguration } from "vitest/config";
import { packageTestConfig } from "./vitest.shared.ts";

// One vitest run over the whole workspace, each package a project: a package
// with its own vitest.config.ts runs with that config (the same one `pnpm
// test` uses inside the package); one without runs with the shared settings
// of vitest.shared.ts rooted at its folder. Every test file of packages/*,
// apps/* and tools/* belongs to exactly one project. Tests import package
// sources through the "@ulysses/source" export condition, so no build step is
// needed before `pnpm test`.
const root = import.meta.dirname ?? new URL(".", import.meta.url).pathname;

const folders = ["packages", "apps", "tools"].flatMap((group) =>
  existsSync(join(root, group))
    ? readdirSync(join(root, group), { withFileTypes: true })
        .filter((entry) => entry.isDirectory() && existsSync(join(root, group, entry.name, "package.json")))
        .map((entry) => `${group}/${entry.name}`)
    : [],
);

const projects: TestProjectConfiguration[] = folders.map((folder) => {
  const config = ["vitest.config.ts", "vitest.config.mts", "vitest.config.js", "vitest.config.mjs"].find((name) => existsSync(join(root, folder, name)));
  if (config) return `${folder}/${config}`;
  const { name } = JSON.parse(readFileSync(join(root, folder, "package.json"), "utf8")) as { name: string };
  const shared = packageTestConfig({ name, root: join(root, folder) });
  return shared;
});

export default defineConfig({
  test: { projects },
});
