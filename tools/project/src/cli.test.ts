import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { parseOptions, runSchemesCheck } from "./cli.js";

describe("pnpm project flags", () => {
  it("defaults: the A100 profile, 32 and 64 devices, ZeRO 3 / 1, 4M tokens per step", () => {
    const options = parseOptions([])!;
    expect(path.basename(options.profile)).toBe("a100-40gb-nvlink-ib.json");
    expect(options.out).toBe(path.resolve(process.env.INIT_CWD ?? process.cwd(), "bench-results", "project"));
    expect(options).toMatchObject({ devices: [32, 64], zeroUlysses: 3, zeroMegatron: 1, globalBatchTokens: 4194304, layout: "zigzag", profileGiven: false });
    expect(options.checkSchemes).toBeUndefined();
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
      "--layout",
      "contiguous",
      "--check-schemes",
      "/s.json",
    ])!;
    expect(options).toEqual({
      profile: "/p.json",
      profileGiven: true,
      out: "/o",
      devices: [8, 16],
      zeroUlysses: 1,
      zeroMegatron: 0,
      globalBatchTokens: 1024,
      layout: "contiguous",
      compareProfiles: [],
      checkSchemes: "/s.json",
    });
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
    expect(() => parseOptions(["--layout", "spiral"])).toThrow("--layout: expected zigzag or contiguous, got 'spiral'");
  });

  it("--check-schemes: the file's own profile, else --profile; a file without one and no --profile is an error", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "schemes-"));
    const row = {
      scheme: "ring",
      layout: "zigzag",
      P: 2,
      u: 1,
      r: 2,
      N: 256,
      heads: 4,
      kvHeads: 4,
      hidden: 64,
      headDim: 16,
      batch: 1,
      stepSeconds: 0.01,
      bytesPerRank: 0,
      overlap: true,
    };
    const machine = {
      name: "file machine",
      devicesPerNode: 2,
      peakTflops: 0.1,
      matmulEfficiency: 0.5,
      attentionEfficiency: 0.5,
      memoryGiB: 8,
      bytesPerElement: 4,
      intraNode: { bandwidthGBs: 1, latencyUs: 0 },
      interNode: { bandwidthGBs: 1, latencyUs: 0 },
    };
    const withProfile = path.join(dir, "with.json");
    const bare = path.join(dir, "bare.json");
    fs.writeFileSync(withProfile, JSON.stringify({ rows: [row], profile: machine }));
    fs.writeFileSync(bare, JSON.stringify({ rows: [row] }));
    const check = runSchemesCheck(parseOptions(["--check-schemes", withProfile])!);
    expect(check.markdown).toContain("file machine");
    expect(() => runSchemesCheck(parseOptions(["--check-schemes", bare])!)).toThrow(/bare.json carries no profile .*--profile/);
    expect(
      runSchemesCheck(
        parseOptions(["--check-schemes", bare, "--profile", path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "profiles", "this-machine.json")])!,
      ).markdown,
    ).toContain("this machine");
    const withRates = path.join(dir, "rates.json");
    const rates = { attention: [{ seqK: 128, gflopsPerRank: 10 }], gemm: [{ gflopsPerRank: 20 }], p2pLatencySeconds: 1e-4, p2pBandwidthBytesPerSecond: 1e9 };
    fs.writeFileSync(withRates, JSON.stringify({ bench: "schemes", rows: [{ ...row, bytesPerRank: [0, 0] }], rates }));
    expect(runSchemesCheck(parseOptions(["--check-schemes", withRates])!).markdown).toContain("bench:schemes rates");
    expect(() => runSchemesCheck(parseOptions(["--check-schemes", path.join(dir, "missing.json")])!)).toThrow(/cannot read schemes file/);
    fs.rmSync(dir, { recursive: true });
  });
});
