import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { isMainModule, packageVersion } from "./entry-point.js";

describe("bin entry points", () => {
  it("recognise the main module through bin symlinks and a missing extension, not by name", () => {
    const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "bin-")));
    const real = path.join(dir, "pkg", "dist", "cli.js");
    fs.mkdirSync(path.dirname(real), { recursive: true });
    fs.writeFileSync(real, "");
    fs.writeFileSync(path.join(dir, "other-cli.js"), "");
    fs.mkdirSync(path.join(dir, ".bin"));
    fs.symlinkSync(path.relative(path.join(dir, ".bin"), real), path.join(dir, ".bin", "ulysses-train"));
    const url = pathToFileURL(real).href;
    expect(isMainModule(url, real)).toBe(true);
    expect(isMainModule(url, path.join(dir, ".bin", "ulysses-train"))).toBe(true);
    expect(isMainModule(url, path.join(dir, "pkg", "dist", "cli"))).toBe(true);
    expect(isMainModule(url, path.join(dir, "other-cli.js"))).toBe(false);
    expect(isMainModule(url, path.join(dir, "missing.js"))).toBe(false);
    expect(isMainModule(url, undefined)).toBe(false);
  });

  it("read the version from the package's own package.json", () => {
    const file = path.join(path.dirname(path.dirname(fileURLToPath(import.meta.url))), "package.json");
    expect(packageVersion()).toBe((JSON.parse(fs.readFileSync(file, "utf8")) as { version: string }).version);
  });
});
