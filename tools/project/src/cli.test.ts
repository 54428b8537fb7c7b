import path from "node:path";
import { describe, expect, it } from "vitest";
import { parseOptions } from "./cli.js";

describe("pnpm project flags", () => {
  it("defaults: the A100 profile, 32 and 64 devices, ZeRO 3 / 1, 4M tokens per step", () => {
    const options = parseOptions([])!;
    expect(path.basename(options.profile)).toBe("a100-40gb-nvlink-ib.json");
    expect(options.out).toBe(path.resolve(process.env.INIT_CWD ?? process.cwd(), "bench-results", "project"));
    expect(options).toMatchObject({ devices: [32, 64], zeroUlysses: 3, zeroMegatron: 1, globalBatchTokens: 4194304 });
  });

  it("reads every flag (the -- that pnpm passes through is skipped)", () => {
    const options = parseOptions([
      "--",
      "--profile",
      "/p.json",
      "--out",
      "/o",
      "--devices",
      "8,16",
      "--zero-ulysses",
      "1",
      "--zero-megatron=0",
      "--global-batch-tokens",
      "1024",
    ])!;
    expect(options).toEqual({ profile: "/p.json", out: "/o", devices: [8, 16], zeroUlysses: 1, zeroMegatron: 0, globalBatchTokens: 1024 });
    expect(parseOptions(["--help"])).toBeUndefined();
    expect(parseOptions(["-h"])).toBeUndefined();
  });

  it("names a bad flag or value", () => {
    expect(() => parseOptions(["--bogus"])).toThrow("Unknown option '--bogus'");
    expect(() => parseOptions(["--out"])).toThrow("--out");
    expect(() => parseOptions(["extra"])).toThrow("Unexpected argument 'extra'");
    expect(() => parseOptions(["--devices", "8,x"])).toThrow("--devices: expected positive integers, got '8,x'");
    expect(() => parseOptions(["--zero-ulysses", "4"])).toThrow("--zero-ulysses: ZeRO stage must be 0, 1, 2 or 3, got '4'");
    expect(() => parseOptions(["--global-batch-tokens", "0"])).toThrow("--global-batch-tokens: expected a positive integer, got '0'");
  });
});
