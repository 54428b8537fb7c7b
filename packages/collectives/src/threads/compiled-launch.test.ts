/**
 * launch from the compiled package, as a user who installed it runs it: the
 * package (and @ulysses/tensors) compiled with tsc into a temporary install
 * tree (node_modules/@ulysses/...), then plain `node` (no tsx, no conditions)
 * runs a main script there that launches 2 ranks with a rank entry importing
 * `@ulysses/collectives` by name. Each rank must have one module instance: the
 * backend the entry registers is found, the threads world has 2 ranks, and a
 * CollectiveError thrown by the group or the registry is `instanceof` the
 * entry's CollectiveError. TypeScript entries: refused up front without
 * `typescript`, a clear error when tsx cannot be found, and working when tsx
 * is installed next to the entry. And `@ulysses/collectives/testing` loads
 * where vitest is not installed.
 */
import { execFile } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const run = promisify(execFile);
const require = createRequire(import.meta.url);
const packageDir = fileURLToPath(new URL("../..", import.meta.url));
const tensorsDir = path.resolve(packageDir, "../tensors");
const fixtures = fileURLToPath(new URL("../testing-fixtures/installed/", import.meta.url));
const env = (() => {
  const e: NodeJS.ProcessEnv = { ...process.env, ORT_DISABLE_TELEMETRY: "1" };
  delete e.NODE_OPTIONS;
  delete e.NODE_PATH;
  return e;
})();

let root = "";
let app = "";

/**
 * Compiles `pkg` into `<root>/node_modules/<name>/dist` and copies its package.json.
 * JavaScript only, the files tsconfig.build.json emits, from a config that
 * extends the package's tsconfig.json: other packages' types come from their
 * sources (the "@ulysses/source" condition), so no package needs building
 * first (tsconfig.build.json reads the referenced packages' dist).
 */
async function install(pkg: string): Promise<void> {
  const manifest = JSON.parse(fs.readFileSync(path.join(pkg, "package.json"), "utf8")) as { name: string };
  const target = path.join(root, "node_modules", manifest.name);
  fs.mkdirSync(target, { recursive: true });
  fs.copyFileSync(path.join(pkg, "package.json"), path.join(target, "package.json"));
  const config = path.join(root, `tsconfig.${path.basename(pkg)}.json`);
  const typeRoots = [path.dirname(path.dirname(require.resolve("@types/node/package.json")))]; // "types": ["node"], from a config outside the workspace
  const compilerOptions = {
    rootDir: path.join(pkg, "src"),
    outDir: path.join(target, "dist"),
    noEmit: false,
    declaration: false,
    declarationMap: false,
    sourceMap: false,
    incremental: false,
    typeRoots,
  };
  const exclude = [path.join(pkg, "src/**/*.test.ts"), path.join(pkg, "src/testing-fixtures/**")];
  fs.writeFileSync(config, JSON.stringify({ extends: path.join(pkg, "tsconfig.json"), compilerOptions, include: [path.join(pkg, "src")], exclude }));
  await run(process.execPath, [require.resolve("typescript/bin/tsc"), "-p", config], { env });
}

/** A dependency of the compiled packages, linked from the workspace's install. */
function link(name: string, from: string): void {
  fs.symlinkSync(fs.realpathSync(path.join(from, "node_modules", name)), path.join(root, "node_modules", name), "dir");
}

interface ErrorReport {
  collective: boolean;
  name?: string;
  message: string;
}

async function launchFromCompiled(entry: string, typescript: boolean, methods: string[]): Promise<Record<string, unknown> & { error?: ErrorReport }> {
  const { stdout } = await run(process.execPath, [path.join(app, "main.mjs"), entry, typescript ? "1" : "0", ...methods], { cwd: app, env, timeout: 30_000 });
  const line = stdout.split("\n").find((l) => l.startsWith("RESULT "));
  if (!line) throw new Error(`no RESULT line in:\n${stdout}`);
  return JSON.parse(line.slice("RESULT ".length)) as never;
}

describe("launch from the compiled package (plain node, no tsx)", () => {
  beforeAll(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), "ulysses-installed-"));
    app = path.join(root, "app");
    fs.mkdirSync(app);
    await Promise.all([install(packageDir), install(tensorsDir)]);
    link("comlink", packageDir);
    link("onnxruntime-common", tensorsDir);
    for (const file of ["main.mjs", "rank.mjs", "rank-typed.ts"]) fs.copyFileSync(path.join(fixtures, file), path.join(app, file));
    // a second app whose own node_modules holds tsx: typescript: true resolves it from the entry's folder
    const tsApp = path.join(root, "ts-app");
    fs.mkdirSync(path.join(tsApp, "node_modules"), { recursive: true });
    fs.writeFileSync(path.join(tsApp, "package.json"), JSON.stringify({ name: "ts-app", private: true, type: "module" }));
    fs.copyFileSync(path.join(fixtures, "rank-typed.ts"), path.join(tsApp, "rank-typed.ts"));
    fs.symlinkSync(path.dirname(require.resolve("tsx/package.json")), path.join(tsApp, "node_modules", "tsx"), "dir");
  }, 60_000);

  afterAll(() => {
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  it("a plain .mjs entry shares the worker's module instance: its backend, the 2-rank world, CollectiveError", async () => {
    const out = await launchFromCompiled(path.join(app, "rank.mjs"), false, ["info", "mismatch", "unknownBackend", "sum"]);
    expect(out.error).toBeUndefined();
    expect(out.info).toEqual(
      [0, 1].map((rank) => ({ rank, worldSize: 2, groupRank: rank, groupSize: 2, threadsSize: 2, wrapped: 1, backends: ["threads", "wrapped"] })),
    );
    const mismatch = out.mismatch as ErrorReport[];
    for (const report of mismatch) expect(report).toMatchObject({ collective: true, name: "CollectiveError" });
    expect(mismatch[0]!.message).toBe(mismatch[1]!.message);
    for (const report of out.unknownBackend as ErrorReport[]) {
      expect(report).toMatchObject({ collective: true });
      expect(report.message).toContain("unknown backend 'no-such-backend'; registered: threads, wrapped");
    }
    // the group still works after the rejected call
    expect(out.sum).toEqual([3, 3]);
    expect(out.exitCodes).toEqual([0, 0]);
  }, 40_000);

  it("a TypeScript entry without typescript: true fails up front, naming the entry and the option", async () => {
    const out = await launchFromCompiled(path.join(app, "rank-typed.ts"), false, ["info"]);
    expect(out.error?.collective).toBe(true);
    expect(out.error?.message).toContain(`entry file://${path.join(app, "rank-typed.ts")} is TypeScript`);
    expect(out.error?.message).toContain("pass typescript: true (needs the 'tsx' package)");
  }, 40_000);

  it("typescript: true without tsx reachable from the entry or the cwd names the option and the package", async () => {
    const out = await launchFromCompiled(path.join(app, "rank-typed.ts"), true, ["info"]);
    expect(out.error?.collective).toBe(true);
    expect(out.error?.message).toMatch(
      /typescript: true registers tsx in every rank, but the package 'tsx' cannot be resolved from .*; install it \(npm i -D tsx\)/,
    );
  }, 40_000);

  it("@ulysses/collectives/testing imports without vitest; only /testing/vitest needs it", async () => {
    const probe = `
      const testing = await import("@ulysses/collectives/testing");
      let vitest;
      try { await import("@ulysses/collectives/testing/vitest"); vitest = "loaded"; } catch (e) { vitest = e.message; }
      console.log("RESULT " + JSON.stringify({ runConformance: typeof testing.runConformance, describeConformance: "describeConformance" in testing, vitest }));`;
    const { stdout } = await run(process.execPath, ["--input-type=module", "-e", probe], { cwd: app, env, timeout: 30_000 });
    const out = JSON.parse(
      stdout
        .split("\n")
        .find((l) => l.startsWith("RESULT "))!
        .slice(7),
    ) as { runConformance: string; describeConformance: boolean; vitest: string };
    expect(out).toMatchObject({ runConformance: "function", describeConformance: false });
    expect(out.vitest).toMatch(/Cannot find package 'vitest'/);
  }, 40_000);

  it("typescript: true runs a TypeScript entry with tsx from the entry's folder, still one instance per rank", async () => {
    const out = await launchFromCompiled(path.join(root, "ts-app", "rank-typed.ts"), true, ["info", "mismatch"]);
    expect(out.error).toBeUndefined();
    expect(out.info).toEqual([0, 1].map((rank) => ({ rank, worldSize: 2, groupSize: 2 })));
    for (const report of out.mismatch as ErrorReport[]) expect(report.collective).toBe(true);
    expect(out.exitCodes).toEqual([0, 0]);
  }, 40_000);
});
