import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it, vi } from "vitest";

const trainerDir = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const tiny = ["--seq", "24", "--hidden", "16", "--heads", "2", "--kv-heads", "2", "--layers", "1", "--batch", "2", "--pairs", "2", "--queries", "2", "--threads", "1", "--log-every", "1"];

function cli(args: string[], env: Record<string, string> = {}, onStdout?: (text: string, child: ReturnType<typeof spawn>) => void): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--conditions=@ulysses/source", "--import", "tsx", "src/cli.ts", ...args], {
      cwd: trainerDir,
      env: { ...process.env, ORT_DISABLE_TELEMETRY: "1", INIT_CWD: "", ...env },
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
      onStdout?.(stdout, child);
    });
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

describe("the CLI on the threads backend", () => {
  it("trains, writes every output, and a failing rank stops the run naming the rank and cause", async () => {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), "cli-"));
    const ok = await cli([...tiny, "--steps", "3", "--out", out]);
    expect(ok.stderr).toBe("");
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/step 3\/3 loss/);
    expect(ok.stdout).toMatch(/\| tokens\/s/);
    const lines = fs.readFileSync(path.join(out, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, number>);
    expect(lines.map((l) => l.step)).toEqual([0, 1, 2]);
    for (const key of ["loss", "lr", "gradNorm", "tokensPerSec", "stepMs", "computeMs", "commMs", "commBytesPerRank", "peakRssBytes", "mfu", "accuracy"]) expect(typeof lines[2]![key], key).toBe("number");
    expect(lines[2]!.commBytesPerRank).toBeGreaterThan(0);
    for (const file of ["loss.svg", "checkpoint.safetensors", "model.onnx", "summary.txt", "config.json"]) expect(fs.existsSync(path.join(out, file)), file).toBe(true);

    // generate answers the same queries from the export and from the checkpoint
    const { generate } = await import("./generate.js");
    const answers = async (from: string) => {
      let text = "";
      await generate({ from, prompt: "", tokens: 0, temperature: 0, topK: 0, seed: 5 }, (t) => (text += t));
      return text.split("\n").filter((l) => l.startsWith("query") || l.startsWith("recall"));
    };
    const fromExport = await answers(path.join(out, "model.onnx"));
    expect(fromExport.at(-1)).toMatch(/^recall: \d\/2 correct/);
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
    const { readSafetensors } = await import("@ulysses/model");
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
    expect(written.join("")).toMatch(/\/nonexistent\/corpus.txt' cannot be read: ENOENT/);
  });
});
