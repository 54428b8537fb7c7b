/**
 * Bad inputs to both bins, as an audit tries them: prototype names as
 * settings, numbers in other notations or out of range, paths on device and
 * pseudo file systems, FIFOs and endless devices named as files, a file
 * that is no backend module. Each must be refused with exit 2 (or 1 for
 * generate's unreadable model files), a message naming the flag, value or
 * file, no raw Node error text, within 2 s and 200 MB of peak RSS growth, and
 * nothing written.
 * Most run in this process through each bin's `main` (the CLI's own entry);
 * the FIFO, /dev/zero and backend cases also run as spawned processes, so a
 * hang fails the test instead of blocking it. The tally of how every input
 * ended is printed (and written to $ULYSSES_AUDIT_OUT when set).
 */
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { helpText } from "./args.js";
import { main as trainMain } from "./cli.js";
import { main as generateMain } from "./generate.js";
import { captureMain } from "./testing-fixtures/capture.js";
import { spawnTrainer } from "./testing-fixtures/cli.js";

/** Raw text of an unhandled Node error that must never reach the user. */
const RAW = /ENOENT:|EISDIR:|Invalid array length|ambiguous|TimeoutOverflowWarning|at .*\(node:|scandir ''/;

let dir: string;
let fifo: string;
const startCwd = process.cwd();

interface Case {
  bin: "train" | "generate";
  argv: string[];
  /** A part of the message: the offending flag, value or file. */
  says: RegExp;
  /** Exit code (default 2). */
  code?: number;
}

const tally = { tried: 0, clear: 0, accepted: 0, crashed: 0 };

function writeConfig(name: string, text: string): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, text);
  return file;
}

/**
 * One case through its bin's main, with the growth of this process's peak RSS
 * it caused (the peak after, less the resident size before: an upper bound).
 */
async function runInProcess(c: Case): Promise<{ code: number; stderr: string; ms: number; grownBytes: number }> {
  const before = process.memoryUsage().rss;
  let result: { code: number; stderr: string; ms: number };
  try {
    result = await captureMain(c.bin === "train" ? trainMain : generateMain, c.argv);
  } catch (error) {
    result = { code: -1, stderr: String(error), ms: 0 };
  }
  return { ...result, grownBytes: process.resourceUsage().maxRSS * 1024 - before };
}

const cases = (): Case[] => {
  const t = (argv: string[], says: RegExp): Case => ({ bin: "train", argv, says });
  const g = (argv: string[], says: RegExp, code = 2): Case => ({ bin: "generate", argv, says, code });
  const big = writeConfig("big.json", `{"sp": 2, "pad": "${"x".repeat(2 * 1024 * 1024)}"}`);
  return [
    // prototype names are unknown settings like any other
    ...["to-string", "constructor", "value-of", "has-own-property", "__proto__", "is-prototype-of", "__define-getter__"].map((name) =>
      t([`--${name}`, "x"], new RegExp(`unknown setting '${name}'`)),
    ),
    t(["--no-to-string"], /unknown setting 'to-string'/),
    t(["--config", writeConfig("tostring.json", '{"toString": 1}')], /unknown setting 'toString'/),
    t(["--config", writeConfig("proto.json", '{"__proto__": null}')], /unknown setting '__proto__'/),
    t(["--config", writeConfig("ctor.json", '{"constructor": {}}')], /unknown setting 'constructor'/),
    // numbers: decimal notation only, in range
    t(["--sp", "0x2"], /--sp needs a number, got '0x2'/),
    t(["--seed", "0x10"], /--seed needs a number, got '0x10'/),
    t(["--sp", "0b10"], /--sp needs a number, got '0b10'/),
    t(["--steps", "0o7"], /--steps needs a number, got '0o7'/),
    t(["--lr", "Infinity"], /--lr needs a number, got 'Infinity'/),
    t(["--steps", "1e400"], /--steps needs a number, got '1e400'/),
    t(["--seq", "NaN"], /--seq needs a number/),
    t(["--config", writeConfig("hex.json", '{"sp": "0x2"}')], /--sp needs a number, got '0x2'/),
    t(["--timeout", "1e303"], /--timeout must be a number of seconds from 1 to 2147483.*got 1e\+303/),
    t(["--timeout", "0.000001"], /--timeout must be a number of seconds from 1 .*got 0\.000001/),
    t(["--timeout", "0"], /--timeout must be/),
    t(["--timeout", "-5"], /--timeout must be/),
    t(["--min-lr", "0.1", "--lr", "0.01"], /--min-lr 0\.1 is above --lr 0\.01/),
    t(["--weight-decay", "1e6"], /--weight-decay 1000000 is above 1/),
    t(["--weight-decay", "-1"], /--weight-decay must be a non-negative number, got -1/),
    t(["--threads", "10000"], /--threads must be an integer from 1 to \d+ .*got 10000/),
    t(["--threads", "0"], /--threads must be an integer from 1/),
    t(["--threads", "1.5"], /--threads must be an integer from 1/),
    t(["--steps", "-1"], /--steps must be 0 \(export the model as loaded\) or a positive integer, got -1/),
    t(["--batch", "1.5"], /--batch must be a positive integer, got 1\.5/),
    t(["--seq", "0"], /--seq must be a positive integer, got 0/),
    t(["--layers", "0"], /--layers must be a positive integer, got 0/),
    t(["--dp", "0"], /--dp must be a positive integer, got 0/),
    t(["--log-every", "0"], /--log-every must be a positive integer, got 0/),
    t(["--warmup", "-1"], /--warmup must be a non-negative integer, got -1/),
    t(["--grad-clip", "-1"], /--grad-clip must be a non-negative number, got -1/),
    t(["--lr", "0"], /--lr must be positive, got 0/),
    t(["--tile-mlp", "-1"], /--tile-mlp must be 0 \(off\), auto or a positive number/),
    t(["--attention", "hybrid", "--sp", "4", "--ulysses-degree", "3"], /--ulysses-degree 3/),
    t(["--heads", "4", "--kv-heads", "3"], /--heads 4 is not divisible by --kv-heads 3/),
    t(["--vocab", "5"], /--vocab 5/),
    // words
    t(["--kernel", "cuda"], /--kernel must be auto, fused or ort, got 'cuda'/),
    t(["--task", "poetry"], /--task must be recall or text, got 'poetry'/),
    t(["--mlp", "relu"], /--mlp must be gelu or swiglu, got 'relu'/),
    t(["--sequence-layout", "diagonal"], /--sequence-layout must be auto, contiguous or zigzag, got 'diagonal'/),
    t(["--memory-arena=maybe"], /--memory-arena is on, off or auto, got 'maybe'/),
    t(["--export=maybe"], /--export is true or false, got 'maybe'/),
    t(["--backend", "carrier-pigeon"], /unknown backend 'carrier-pigeon'/),
    t(["--no-sp"], /--no-sp is only for on\/off switches/),
    t(["--sp"], /--sp needs a value/),
    t(["positional"], /unexpected argument 'positional'/),
    t(["--frobnicate", "1"], /unknown setting 'frobnicate'/),
    // paths
    t(["--out", ""], /--out needs a directory name, got ''/),
    t(["--out", "/dev/ulysses-audit-run"], /--out '\/dev\/ulysses-audit-run': that is in \/dev/),
    t(["--out", "/sys/ulysses-audit-run"], /--out '\/sys\/ulysses-audit-run': that is on the sysfs pseudo file system/),
    t(["--out", "/proc/self/ulysses-audit-run"], /--out '\/proc\/self\/ulysses-audit-run': that is on the proc pseudo file system/),
    t(["--resume", "no-such-run"], /--resume 'no-such-run'/),
    t(["--data", "no-such-corpus.txt"], /--data 'no-such-corpus\.txt': no such file or directory/),
    t(["--data", fifo], /--data '.*audit\.fifo' is a FIFO/),
    t(["--data", "/dev/null"], /--data '\/dev\/null' is a character device/),
    t(["--config", "no-such.json"], /config file 'no-such\.json' cannot be read: no such file or directory/),
    t(["--config", fifo], /config file '.*audit\.fifo' is a FIFO/),
    t(["--config", "/dev/zero"], /config file '\/dev\/zero' is a character device/),
    t(["--config", big], /config file '.*big\.json' holds \d+ bytes, more than the 1048576/),
    t(["--config", writeConfig("array.json", "[]")], /config file '.*array\.json' must hold a JSON object/),
    t(["--config", writeConfig("broken.json", "{")], /config file '.*broken\.json' cannot be read as JSON/),
    t(["--backend", "/etc/passwd"], /--backend '\/etc\/passwd': backend module '\/etc\/passwd' could not be loaded/),
    t(["--backend", writeConfig("not-a-backend.mjs", "export const x = 1;\n")], /exports neither a default function nor createBackend/),
    // generate
    g(["--tokens", "-1"], /--tokens must be an integer in \[0, 1000000\], got '-1'/),
    g(["--temperature", "-1"], /--temperature must be a number in \[0, 1000\], got '-1'/),
    g(["--top-k", "-3"], /--top-k must be an integer in \[0, \d+\], got '-3'/),
    g(["--seed", "-1"], /--seed must be an integer in \[0, \d+\], got '-1'/),
    g(["--seed", "0x10"], /--seed must be an integer in \[0, \d+\], got '0x10'/),
    g(["--tokens", "1.5"], /--tokens must be an integer/),
    g(["--temperature", "Infinity"], /--temperature must be a number/),
    g(["--from", ""], /--from needs a path/),
    g(["--nope"], /Unknown option '--nope'/),
    g(["--from", fifo], /--from '.*audit\.fifo' is a FIFO/, 1),
    g(["--from", "/dev/zero"], /--from '\/dev\/zero' is a character device/, 1),
    g(["--from", "no-such-run"], /--from 'no-such-run' does not exist/, 1),
  ];
};

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "ulysses-bad-inputs-"));
  fifo = path.join(dir, "audit.fifo");
  execFileSync("mkfifo", [fifo]);
  delete process.env.INIT_CWD; // main() would change to it
  // a run directory that appears anywhere under here (runs/<timestamp>) is a write that should not have happened
  fs.mkdirSync(path.join(dir, "cwd"));
  process.chdir(path.join(dir, "cwd"));
});

afterAll(() => {
  process.chdir(startCwd);
  fs.rmSync(dir, { recursive: true, force: true });
  const line = `bad inputs: ${tally.tried} tried, ${tally.clear} refused clearly, ${tally.accepted} accepted, ${tally.crashed} crashed or unclear`;
  console.log(line);
  if (process.env.ULYSSES_AUDIT_OUT) fs.writeFileSync(process.env.ULYSSES_AUDIT_OUT, `${JSON.stringify(tally)}\n`);
});

describe("bad inputs are refused clearly, quickly, and before anything is written", () => {
  it("every case in the table (in-process, through each bin's main)", async () => {
    const list = cases();
    const failures: string[] = [];
    for (const c of list) {
      const { code, stderr, ms, grownBytes } = await runInProcess(c);
      const expected = c.code ?? 2;
      tally.tried++;
      const written = fs.readdirSync(path.join(dir, "cwd"));
      const problem =
        code === 0
          ? "accepted"
          : code !== expected || !c.says.test(stderr) || RAW.test(stderr) || ms > 2000 || grownBytes > 200e6 || written.length > 0
            ? `exit ${code}, ${ms.toFixed(0)} ms, peak RSS +${(grownBytes / 1e6).toFixed(0)} MB, wrote [${written.join(", ")}]: ${stderr.trim().slice(0, 300)}`
            : null;
      if (problem === null) tally.clear++;
      else {
        if (code === 0) tally.accepted++;
        else tally.crashed++;
        failures.push(`${c.bin} ${c.argv.map((a) => (a.length > 60 ? `${a.slice(0, 57)}...` : a)).join(" ")}: ${problem}`);
      }
    }
    for (const probe of ["/dev/ulysses-audit-run", "/sys/ulysses-audit-run"]) expect(fs.existsSync(probe), probe).toBe(false);
    expect(failures, failures.join("\n")).toEqual([]);
    expect(list.length).toBeGreaterThanOrEqual(60);
  });

  it("as spawned processes: a FIFO or /dev/zero as --config, a FIFO to generate, a file that is no backend module", async () => {
    const runs = await Promise.all([
      spawnTrainer(["--config", fifo, "--out", path.join(dir, "a")]),
      spawnTrainer(["--config", "/dev/zero", "--out", path.join(dir, "b")]),
      spawnTrainer(["--backend", "/etc/passwd", "--out", path.join(dir, "c")]),
      spawnTrainer(["--from", fifo], { script: "src/generate.ts" }),
    ]);
    const [fifoConfig, zero, backend, generateFifo] = runs;
    expect(fifoConfig!.code, fifoConfig!.stderr).toBe(2);
    expect(fifoConfig!.stderr).toMatch(/is a FIFO/);
    expect(zero!.code, zero!.stderr).toBe(2);
    expect(zero!.stderr).toMatch(/is a character device/);
    expect(backend!.code, backend!.stderr).toBe(2);
    expect(backend!.stderr).toMatch(/--backend '\/etc\/passwd'/);
    expect(generateFifo!.code, generateFifo!.stderr).toBe(1);
    expect(generateFifo!.stderr).toMatch(/is a FIFO/);
    for (const out of ["a", "b", "c"]) expect(fs.existsSync(path.join(dir, out)), out).toBe(false);
  }, 60_000);
});

describe("--help fits a 100-column terminal", () => {
  it("train's and generate's help have no line over 100 columns", async () => {
    let generateHelp = "";
    const out = vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array) => {
      generateHelp += String(chunk);
      return true;
    });
    try {
      expect(await generateMain(["--help"])).toBe(0);
    } finally {
      out.mockRestore();
    }
    for (const [bin, text] of [
      ["train", helpText()],
      ["generate", generateHelp],
    ] as const) {
      const long = text.split("\n").filter((line) => line.length > 100);
      expect(long, `${bin} --help`).toEqual([]);
      expect(text.split("\n").length, `${bin} --help`).toBeGreaterThan(10);
    }
  });
});

describe("a refusal under `pnpm train` says what pnpm's ELIFECYCLE line means", () => {
  it("exit 2, the refusal, then the note before pnpm's own line", () => {
    const repo = path.resolve(import.meta.dirname, "../../..");
    const run = spawnSync("npx", ["-y", "pnpm@12.4.2", "train", "--heads", "3"], {
      cwd: repo,
      encoding: "utf8",
      timeout: 60_000,
      env: { ...process.env, ORT_DISABLE_TELEMETRY: "1", INIT_CWD: "" },
    });
    expect(run.status, run.stderr).toBe(2);
    expect(run.stderr).toMatch(/--hidden 128 is not divisible by --heads 3/);
    const note = run.stderr.indexOf("note: nothing was started or written (exit code 2");
    expect(note, run.stderr).toBeGreaterThan(0);
    const pnpmLine = run.stderr.indexOf("ELIFECYCLE");
    if (pnpmLine >= 0) expect(note).toBeLessThan(pnpmLine);
  }, 90_000);
});
