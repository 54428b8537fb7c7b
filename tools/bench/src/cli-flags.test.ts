import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { parseFlags, positiveInteger, positiveIntegers, positiveNumbers, UsageError } from "./cli-flags.js";

const FLAGS = { out: { type: "string" }, quick: { type: "boolean" }, sizes: { type: "string", default: "1,2" } } as const;

describe("bench command lines", () => {
  it("reads flags with their defaults and skips the -- pnpm passes through", () => {
    expect(parseFlags("bench:x", ["--", "--out", "dir", "--quick"], FLAGS)).toEqual({ out: "dir", quick: true, sizes: "1,2" });
    expect(parseFlags("bench:x", ["--out=dir"], FLAGS)).toEqual({ out: "dir", sizes: "1,2" });
  });

  it("--help and -h win over everything else", () => {
    expect(parseFlags("bench:x", ["--help"], FLAGS)).toBeNull();
    expect(parseFlags("bench:x", ["--bogus", "-h"], FLAGS)).toBeNull();
  });

  it("a bad flag is a UsageError naming the command and the flag", () => {
    expect(() => parseFlags("bench:x", ["--bogus"], FLAGS)).toThrow(UsageError);
    expect(() => parseFlags("bench:x", ["--bogus"], FLAGS)).toThrow("bench:x: Unknown option '--bogus'");
    expect(() => parseFlags("bench:x", ["--out"], FLAGS)).toThrow("bench:x: Option '--out <value>' argument missing");
    expect(() => parseFlags("bench:x", ["word"], FLAGS)).toThrow("bench:x: Unexpected argument 'word'");
  });

  it("value readers name the flag and the value", () => {
    expect(positiveInteger("--n", "12")).toBe(12);
    expect(positiveIntegers("--ranks", "1,2,4")).toEqual([1, 2, 4]);
    expect(positiveNumbers("--sizes", "0.5,8")).toEqual([0.5, 8]);
    expect(() => positiveInteger("--n", "1.5")).toThrow("--n: expected a positive integer, got '1.5'");
    expect(() => positiveInteger("--n", "")).toThrow("--n: expected a positive integer, got ''");
    expect(() => positiveIntegers("--ranks", "2,")).toThrow("--ranks: expected positive integers separated by commas, got '2,'");
    expect(() => positiveNumbers("--sizes", "1,-1")).toThrow("--sizes: expected positive numbers separated by commas, got '1,-1'");
  });

  it("an entry point prints its usage for --help (exit 0) and exits 2 on a bad flag", () => {
    const entry = fileURLToPath(new URL("./collectives-bench.ts", import.meta.url));
    const run = (...args: string[]) =>
      spawnSync(process.execPath, ["--conditions=@ulysses/source", "--import", "tsx", entry, ...args], {
        encoding: "utf8",
        env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" },
      });
    const help = run("--help");
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^Usage: pnpm bench:collectives \[flags\]/);
    const bad = run("--rank", "2");
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/^bench:collectives: Unknown option '--rank'/);
    const value = run("--ranks", "two");
    expect(value.status).toBe(2);
    expect(value.stderr).toMatch(/^--ranks: expected positive integers separated by commas, got 'two'/);
  });
});
