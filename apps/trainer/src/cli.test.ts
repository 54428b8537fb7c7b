import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it, vi } from "vitest";
import { readSafetensors } from "@ulysses/model";
import { type SpawnOptions, type Spawned, spawnTrainer, tinyFlags, trainerDir } from "./testing-fixtures/cli.js";

const tiny = [...tinyFlags(), "--log-every", "1"];

interface Row {
  step: number;
  time: string;
  loss: number;
}

function metricsRows(out: string): Row[] {
  return fs
    .readFileSync(path.join(out, "metrics.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Row);
}

const packageJson = JSON.parse(fs.readFileSync(path.join(trainerDir, "package.json"), "utf8")) as { version: string };

/** The exit code and output of the CLI (or `script`) run with `args`. */
async function cli(
  args: string[],
  env: Record<string, string> = {},
  onStdout?: SpawnOptions["onStdout"],
  script = "src/cli.ts",
): Promise<Pick<Spawned, "code" | "stdout" | "stderr">> {
  const { code, stdout, stderr } = await spawnTrainer(args, { env, onStdout, script });
  return { code, stdout, stderr };
}

describe("the CLI on the threads backend", () => {
  it("trains, writes every output, and a failing rank stops the run naming the rank and cause", async () => {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), "cli-"));
    const ok = await cli([...tiny, "--steps", "3", "--out", out]);
    expect(ok.stderr).toBe("");
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/step 3\/3 loss/);
    expect(ok.stdout).toMatch(/\| tokens\/s/);
    const lines = fs
      .readFileSync(path.join(out, "metrics.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, number>);
    expect(lines.map((l) => l.step)).toEqual([1, 2, 3]);
    for (const key of [
      "loss",
      "lr",
      "gradNorm",
      "tokensPerSec",
      "stepMs",
      "computeMs",
      "commMs",
      "commBytesPerRank",
      "peakRssBytes",
      "mfu",
      "matmulRate",
      "accuracy",
    ])
      expect(typeof lines[2]![key], key).toBe("number");
    expect(lines[2]!.commBytesPerRank).toBeGreaterThan(0);
    // the MFU's denominator: the start-up rate the header printed, the same in every row; and mfu x matmulRate x step time is the
    // model's FLOPs per step (@ulysses/measure's count, checked against the parameter specs in flops.test.ts) for this run's config
    const printedRate = Number(/ORT MatMul rate ([\d.]+) GFLOP\/s/.exec(ok.stdout)?.[1]);
    expect(new Set(lines.map((l) => l.matmulRate)).size).toBe(1);
    expect(lines[0]!.matmulRate! / 1e9).toBeCloseTo(printedRate, 1);
    const { gptConfigOf } = await import("./config.js");
    const { modelFlopsPerStep } = await import("./flops.js");
    const config = JSON.parse(fs.readFileSync(path.join(out, "config.json"), "utf8"));
    const modelFlops = modelFlopsPerStep(gptConfigOf(config), config.batch * config.dp * config.seq, config.seq);
    const flops = lines.map((l) => (l.mfu! * l.matmulRate! * l.stepMs!) / 1000);
    for (const f of flops) expect(Math.abs(f / modelFlops - 1)).toBeLessThan(1e-9);
    for (const file of ["loss.svg", "checkpoint.safetensors", "model.onnx", "summary.txt", "config.json"])
      expect(fs.existsSync(path.join(out, file)), file).toBe(true);

    // generate answers the same queries from the export and from the checkpoint
    const { generate } = await import("./generate.js");
    const answers = async (from: string) => {
      let text = "";
      await generate({ from, prompt: "", tokens: 0, temperature: 0, topK: 0, seed: 5 }, (t) => (text += t));
      return text.split("\n").filter((l) => l.startsWith("query") || l.startsWith("recall"));
    };
    const fromExport = await answers(path.join(out, "model.onnx"));
    expect(fromExport.at(-1)).toMatch(/^recall: \d\/6 correct/); // seq 24: queries at [18, 24)
    expect(await answers(path.join(out, "checkpoint.safetensors"))).toEqual(fromExport);

    const failed = await cli([...tiny, "--steps", "5", "--out", path.join(out, "failed")], { ULYSSES_TRAINER_FAIL: "1:2" });
    expect(failed.code).toBe(1);
    expect(failed.stderr).toMatch(/rank 1/);
    expect(failed.stderr).toMatch(/injected failure/);
  });

  it("Ctrl-C finishes the step, leaves a complete checkpoint and exits with 130", async () => {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), "sigint-"));
    let sent = false;
    const result = await cli([...tiny, "--steps", "500", "--out", out], {}, (text, child) => {
      if (!sent && /step 2\/500/.test(text)) {
        sent = true;
        child.kill("SIGINT");
      }
    });
    expect(result.code).toBe(130);
    expect(result.stdout).toMatch(/stopped at step \d+; resume with --resume/);
    const steps = fs.readFileSync(path.join(out, "metrics.jsonl"), "utf8").trim().split("\n").length;
    expect(steps).toBeGreaterThanOrEqual(2);
    expect(steps).toBeLessThan(500);
    expect(readSafetensors(path.join(out, "checkpoint.safetensors")).metadata.step).toBe(String(steps));
  });

  it("rejects bad settings before starting any rank, naming the values (exit code 2)", async () => {
    const { main } = await import("./cli.js");
    process.env.INIT_CWD = "";
    const written: string[] = [];
    const spy = vi.spyOn(process.stderr, "write").mockImplementation((chunk: string | Uint8Array) => {
      written.push(String(chunk));
      return true;
    });
    try {
      expect(await main(["--sp", "8", "--heads", "4", "--backend", "nccl"])).toBe(2);
      expect(await main(["--data", "/nonexistent/corpus.txt", "--steps", "1"])).toBe(2);
    } finally {
      spy.mockRestore();
    }
    expect(written.join("")).toMatch(/unknown backend 'nccl'/);
    expect(written.join("")).toMatch(/--data '\/nonexistent\/corpus.txt': no such file or directory \(ENOENT\)/);
  });

  it("metrics.jsonl counts steps from 1, like the console and the checkpoint, with an ISO-8601 time per row", async () => {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), "metrics-"));
    const startedAt = Date.now();
    const result = await cli([...tiny, "--steps", "4", "--no-export", "--out", out]);
    expect(result.code, result.stderr).toBe(0);
    const rows = metricsRows(out);
    expect(rows.map((r) => r.step)).toEqual([1, 2, 3, 4]);
    expect(result.stdout).toMatch(/step 1\/4 loss/);
    expect(readSafetensors(path.join(out, "checkpoint.safetensors")).metadata.step).toBe(String(rows.at(-1)!.step));
    let previous = startedAt - 1000;
    for (const row of rows) {
      expect(row.time).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
      const t = Date.parse(row.time);
      expect(new Date(t).toISOString()).toBe(row.time);
      expect(t).toBeGreaterThanOrEqual(previous);
      expect(t).toBeLessThanOrEqual(Date.now());
      previous = t;
    }
    expect(fs.readFileSync(path.join(out, "summary.txt"), "utf8")).toMatch(/\| steps +\| 1\.\.4 +\|/);
  });

  it("SIGTERM saves a checkpoint and exits 143; --resume then reproduces the uninterrupted run bit for bit", async () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), "sigterm-"));
    const flags = [...tiny, "--steps", "200", "--warmup", "5", "--checkpoint-every", "0", "--no-export"];
    const whole = await cli([...flags, "--out", path.join(root, "whole")]);
    expect(whole.code, whole.stderr).toBe(0);

    const split = path.join(root, "split");
    let sent = false;
    const stopped = await cli([...flags, "--out", split], {}, (text, child) => {
      if (!sent && /step 3\/200/.test(text)) {
        sent = true;
        child.kill("SIGTERM");
      }
    });
    expect(stopped.code, stopped.stderr).toBe(143);
    expect(stopped.stdout).toMatch(/SIGTERM: stopping after the current step and saving a checkpoint/);
    expect(stopped.stdout).toMatch(/stopped at step \d+; resume with --resume/);
    const taken = metricsRows(split).length;
    expect(taken).toBeGreaterThanOrEqual(3);
    expect(taken).toBeLessThan(200);
    expect(readSafetensors(path.join(split, "checkpoint.safetensors")).metadata.step).toBe(String(taken));
    for (const file of ["loss.svg", "summary.txt"]) expect(fs.existsSync(path.join(split, file)), file).toBe(true);

    const resumed = await cli(["--resume", split]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stdout).toMatch(new RegExp(`resumed from .* at step ${taken}`));
    const a = metricsRows(path.join(root, "whole"));
    const b = metricsRows(split);
    expect(b.map((r) => r.step)).toEqual(a.map((r) => r.step));
    expect(b.map((r) => r.loss)).toEqual(a.map((r) => r.loss));
    const wholeCheckpoint = readSafetensors(path.join(root, "whole", "checkpoint.safetensors"));
    const splitCheckpoint = readSafetensors(path.join(split, "checkpoint.safetensors"));
    expect(splitCheckpoint.metadata.step).toBe("200");
    expect(splitCheckpoint.metadata.rng).toBe(wholeCheckpoint.metadata.rng);
    expect([...splitCheckpoint.tensors.keys()]).toEqual([...wholeCheckpoint.tensors.keys()]);
    for (const [name, t] of wholeCheckpoint.tensors) expect([...splitCheckpoint.tensors.get(name)!.data], name).toEqual([...t.data]);
  }, 120_000);
});

describe("the bins' command lines", () => {
  it("--version and -V print the version in package.json (exit 0), for ulysses-train and ulysses-generate", async () => {
    for (const [script, flag] of [
      ["src/cli.ts", "--version"],
      ["src/cli.ts", "-V"],
      ["src/generate.ts", "--version"],
      ["src/generate.ts", "-V"],
    ] as const) {
      const result = await cli([flag], {}, undefined, script);
      expect(result, `${script} ${flag}`).toEqual({ code: 0, stdout: `${packageJson.version}\n`, stderr: "" });
    }
  });

  it("a bad flag exits 2 naming the flag, and --help lists the exit codes", async () => {
    const train = await cli(["--bogus", "1"]);
    expect(train.code).toBe(2);
    expect(train.stderr).toMatch(/unknown setting 'bogus'/);
    const generate = await cli(["--bogus"], {}, undefined, "src/generate.ts");
    expect(generate.code).toBe(2);
    expect(generate.stderr).toMatch(/--bogus/);
    const help = await cli(["--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/Usage: ulysses-train/);
    expect(help.stdout).toMatch(/0 done, 1 error .*2 bad flags/);
    expect(help.stdout).toMatch(/130 stopped by SIGINT .*143 stopped by SIGTERM/);
  });
});
