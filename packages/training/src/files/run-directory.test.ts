import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { checkRunDir, clearRunFiles, createRunDir, removeStaleTemporaries, type RunDirCheck } from "./run-directory.js";

const run = { files: ["ckpt.bin", "log.jsonl", "notes.txt"], markers: ["ckpt.bin", "log.jsonl"] };
const check = (over: Partial<RunDirCheck> = {}): RunDirCheck => ({
  flag: "--dir",
  resumeDir: null,
  overwrite: false,
  run,
  names: { resume: "--continue", out: "--dir", overwrite: "--replace" },
  ...over,
});
const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), "run-directory-"));

describe("run directories", () => {
  it("says new, empty, resumed or overwritten, and refuses a run or a non-empty folder in the program's own names", () => {
    const root = tmp();
    expect(checkRunDir(path.join(root, "a", "b"), check())).toBe("new");
    expect(checkRunDir(root, check())).toBe("empty");
    fs.writeFileSync(path.join(root, "log.jsonl"), "");
    expect(() => checkRunDir(root, check())).toThrow(
      `--dir '${root}' holds a run (log.jsonl): continue it with --continue '${root}', write elsewhere with another --dir, or replace it with --replace`,
    );
    expect(checkRunDir(root, check({ resumeDir: root }))).toBe("resumed");
    expect(checkRunDir(root, check({ overwrite: true }))).toBe("overwritten");
    const other = tmp();
    fs.writeFileSync(path.join(other, "x"), "");
    expect(() => checkRunDir(other, check())).toThrow(/is not empty \(1 entry: 'x'\) and holds no run: .* pass --replace/);
    expect(() => checkRunDir(path.join(other, "x"), check())).toThrow(/exists and is not a directory/);
  });

  it("refuses pseudo file systems and /dev before writing anything", () => {
    expect(() => checkRunDir("/proc/self/run", check())).toThrow(/on the proc pseudo file system/);
    expect(() => checkRunDir("/dev/run", check())).toThrow(/in \/dev, the device directory/);
  });

  it("creates the parents, removes only the run's stale temporaries and files", () => {
    const dir = path.join(tmp(), "p", "q");
    createRunDir(dir, "--dir");
    for (const name of [".ckpt.bin.tmp-1-2-3", ".other.tmp-1-2-3", "notes.txt", "mine.txt"]) fs.writeFileSync(path.join(dir, name), "");
    expect(removeStaleTemporaries(dir, run)).toEqual([".ckpt.bin.tmp-1-2-3"]);
    clearRunFiles(dir, run);
    expect(fs.readdirSync(dir).sort()).toEqual([".other.tmp-1-2-3", "mine.txt"]);
  });
});
