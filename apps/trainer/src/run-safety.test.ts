/**
 * Runs you can trust: a checkpoint is data (it never names code or paths the
 * trainer follows), a run directory is never replaced silently, every
 * validation comes before the first write, and errno problems name the flag.
 * Runs use tiny models on the `local` backend through the CLI's main().
 */
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { readSafetensors, writeSafetensors } from "@ulysses/model";
import { main } from "./cli.js";
import { captureMain } from "./testing-fixtures/capture.js";
import { readMetricsFile, removeStaleTemporaries } from "@ulysses/training";
import { RUN_FILES } from "./run.js";
import { tinyFlags } from "./testing-fixtures/cli.js";

const tiny = [...tinyFlags(), "--log-every", "1", "--backend", "local"];

interface Outcome {
  code: number;
  stderr: string;
  ms: number;
}

/** Runs the CLI's main() in this process, capturing stderr (stdout is swallowed). */
const train = (args: string[]): Promise<Outcome> => captureMain(main, args);

/** Every file under `dir` with its SHA-256 (to prove a directory was left byte-identical). */
function snapshot(dir: string): Record<string, string> {
  const result: Record<string, string> = {};
  for (const entry of fs.readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const file = path.join(entry.parentPath, entry.name);
    result[path.relative(dir, file)] = crypto.createHash("sha256").update(fs.readFileSync(file)).digest("hex");
  }
  return result;
}

function tempDir(prefix: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/** Rewrites `dir`'s checkpoint with other metadata settings (what an attacker, or an older version, would write). */
function craftSettings(dir: string, settings: Record<string, unknown>): void {
  const file = path.join(dir, "checkpoint.safetensors");
  const { tensors, metadata } = readSafetensors(file);
  writeSafetensors(file, tensors, { ...metadata, settings: JSON.stringify(settings) });
}

/** A module that leaves `marker` behind if it is ever imported. */
function evilModule(dir: string): { module: string; marker: string } {
  const marker = path.join(dir, "IMPORTED");
  const module = path.join(dir, "evil.mjs");
  fs.writeFileSync(module, `import fs from "node:fs";\nfs.writeFileSync(${JSON.stringify(marker)}, "imported");\nexport {};\n`);
  return { module, marker };
}

const steps = (dir: string) => readMetricsFile(path.join(dir, "metrics.jsonl")).rows.map((r) => r.step);

let root: string;
/** A finished 2-step recall run (never modified: tests copy it). */
let base: string;

function copyOfBase(name: string): string {
  const dir = path.join(root, name);
  fs.cpSync(base, dir, { recursive: true });
  return dir;
}

beforeAll(async () => {
  root = tempDir("run-safety-");
  base = path.join(root, "base");
  const result = await train([...tiny, "--steps", "2", "--no-export", "--checkpoint-every", "0", "--out", base]);
  expect(result.code, result.stderr).toBe(0);
}, 60_000);

describe("a checkpoint is data", () => {
  it("new checkpoints record no code or paths", () => {
    const settings = JSON.parse(readSafetensors(path.join(base, "checkpoint.safetensors")).metadata.settings!) as Record<string, unknown>;
    for (const key of ["backend", "out", "data", "resume"]) expect(settings, key).not.toHaveProperty(key);
    expect(settings).toMatchObject({ task: "recall", steps: 2, seq: 24 });
  });

  it("a crafted checkpoint naming a backend module, a foreign out and data runs no code and writes only into the resumed directory", async () => {
    const run = copyOfBase("crafted");
    const attacker = tempDir("attacker-");
    const { module, marker } = evilModule(attacker);
    const foreignOut = path.join(attacker, "foreign-out");
    const foreignData = path.join(attacker, "data.txt");
    fs.writeFileSync(foreignData, "x".repeat(1000));
    const recorded = JSON.parse(readSafetensors(path.join(run, "checkpoint.safetensors")).metadata.settings!) as Record<string, unknown>;
    craftSettings(run, { ...recorded, backend: module, out: foreignOut, data: foreignData, steps: 3 });
    const before = snapshot(attacker);
    const result = await train(["--resume", run, "--backend", "local"]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toMatch(/records backend ".*evil\.mjs", out ".*foreign-out", data ".*data\.txt": ignored \(a checkpoint never chooses code or paths/);
    expect(fs.existsSync(marker)).toBe(false);
    expect(fs.existsSync(foreignOut)).toBe(false);
    expect(snapshot(attacker)).toEqual(before);
    expect(steps(run)).toEqual([1, 2, 3]);
    expect(readSafetensors(path.join(run, "checkpoint.safetensors")).metadata.step).toBe("3");
  });

  it("the default backend stays the command line's: the recorded module is never imported, even when the run is refused (under 1 s)", async () => {
    const run = copyOfBase("crafted-refused");
    const attacker = tempDir("attacker-");
    const { module, marker } = evilModule(attacker);
    craftSettings(run, { backend: module, out: path.join(attacker, "out"), task: "recall", steps: 2, seq: 24 });
    const before = snapshot(run);
    const result = await train(["--resume", run, "--steps", "1"]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/--steps 1 is below the step 2 that checkpoint '.*' has reached/);
    expect(result.ms).toBeLessThan(1000);
    expect(fs.existsSync(marker)).toBe(false);
    expect(fs.readdirSync(attacker)).toEqual(["evil.mjs"]);
    expect(snapshot(run)).toEqual(before);
  });

  it("--resume of a copied run writes into the copy; the original stays byte-identical (even when the checkpoint names it as out)", async () => {
    const original = copyOfBase("original");
    const recorded = JSON.parse(readSafetensors(path.join(original, "checkpoint.safetensors")).metadata.settings!) as Record<string, unknown>;
    craftSettings(original, { ...recorded, out: original });
    const copy = path.join(root, "copy");
    fs.cpSync(original, copy, { recursive: true });
    const before = snapshot(original);
    const result = await train(["--resume", copy, "--steps", "4", "--backend", "local"]);
    expect(result.code, result.stderr).toBe(0);
    expect(snapshot(original)).toEqual(before);
    expect(steps(copy)).toEqual([1, 2, 3, 4]);
    expect(JSON.parse(fs.readFileSync(path.join(copy, "config.json"), "utf8"))).toMatchObject({ steps: 4, hidden: 16, seq: 24 });
  });

  it("--resume FILE writes into the file's directory, or into --out (which then gets the metrics history up to the checkpoint)", async () => {
    const source = copyOfBase("file-source");
    const before = snapshot(source);
    const elsewhere = path.join(root, "file-elsewhere");
    const result = await train(["--resume", path.join(source, "checkpoint.safetensors"), "--out", elsewhere, "--steps", "3", "--backend", "local"]);
    expect(result.code, result.stderr).toBe(0);
    expect(snapshot(source)).toEqual(before);
    expect(steps(elsewhere)).toEqual([1, 2, 3]);
    const inPlace = await train(["--resume", path.join(source, "checkpoint.safetensors"), "--steps", "3", "--backend", "local"]);
    expect(inPlace.code, inPlace.stderr).toBe(0);
    expect(steps(source)).toEqual([1, 2, 3]);
  });

  it("refuses, up front and naming both values, flags that conflict with the checkpoint; the run directory is left byte-identical", async () => {
    const run = copyOfBase("conflicts");
    const data = path.join(root, "conflict-data.txt");
    fs.writeFileSync(data, "hello world ".repeat(20));
    const before = snapshot(run);
    const cases: [string[], RegExp][] = [
      [["--hidden", "32"], /--hidden 32 conflicts with checkpoint '.*', whose model has hidden 16 \(leave --hidden out to use it\)/],
      [["--layers", "3"], /--layers 3 conflicts with .* layers 1/],
      [["--kv-heads", "1"], /--kv-heads 1 conflicts with .* kv-heads 2/],
      [["--mlp-ratio", "2"], /--mlp-ratio 2 conflicts with .* mlp-ratio 4/],
      [["--no-tied-head"], /--tied-head false conflicts with .* tied-head true/],
      [["--seq", "48"], /--seq 48 is beyond the longest sequence the model of checkpoint '.*' was built for \(maxSeq 24\)/],
      [["--vocab", "64"], /--vocab 64 conflicts with checkpoint '.*', whose model has vocab 16/],
      [["--task", "text", "--data", data], /--task text conflicts with the recall task of checkpoint/],
      [["--data", data], /--data '.*conflict-data.txt': checkpoint '.*' is a recall-task run, which reads no data file/],
      [["--steps", "1"], /--steps 1 is below the step 2 that checkpoint '.*' has reached/],
    ];
    for (const [flags, message] of cases) {
      const result = await train(["--resume", run, "--backend", "local", ...flags]);
      expect(result.code, flags.join(" ")).toBe(2);
      expect(result.stderr, flags.join(" ")).toMatch(message);
      expect(result.ms, flags.join(" ")).toBeLessThan(1000);
    }
    // the same shape given again is fine (and so is a shorter --seq); nothing was written by the refusals
    expect(snapshot(run)).toEqual(before);
    const same = await train(["--resume", run, "--backend", "local", "--hidden", "16", "--layers", "1", "--seq", "20", "--steps", "3"]);
    expect(same.code, same.stderr).toBe(0);
    expect(steps(run)).toEqual([1, 2, 3]);
  });

  it("a text checkpoint needs --data on the command line (it never names the file)", async () => {
    const dir = path.join(root, "text-run");
    const data = path.join(root, "corpus.txt");
    fs.writeFileSync(data, "the quick brown fox jumps over the lazy dog. ".repeat(10));
    const first = await train([...tiny, "--data", data, "--steps", "1", "--no-export", "--out", dir]);
    expect(first.code, first.stderr).toBe(0);
    const missing = await train(["--resume", dir, "--backend", "local", "--steps", "2"]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/is a text-task run: give the data file with --data FILE \(it was trained on a file of 450 bytes\)/);
    const other = path.join(root, "other.txt");
    fs.writeFileSync(other, "another corpus, quite different from the first one. ".repeat(5));
    const resumed = await train(["--resume", dir, "--backend", "local", "--steps", "2", "--data", other]);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stderr).toMatch(/is not the file checkpoint '.*' was trained on \(450 bytes, another SHA-256\)/);
  });
});

describe("a run directory is never replaced silently", () => {
  it("--out on an existing run is refused without --overwrite and replaced with it", async () => {
    const run = copyOfBase("existing");
    const before = snapshot(run);
    const refused = await train([...tiny, "--steps", "1", "--no-export", "--out", run]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(
      /--out '.*existing' holds a run \(checkpoint.safetensors, metrics.jsonl, config.json\): continue it with --resume '.*existing', write elsewhere with another --out, or replace it with --overwrite/,
    );
    expect(snapshot(run)).toEqual(before);
    const replaced = await train([...tiny, "--steps", "1", "--no-export", "--out", run, "--overwrite"]);
    expect(replaced.code, replaced.stderr).toBe(0);
    expect(steps(run)).toEqual([1]);
  });

  it("a non-empty directory that is not a run is refused without --overwrite, and the message says so", async () => {
    const dir = tempDir("notes-");
    fs.writeFileSync(path.join(dir, "notes.txt"), "mine");
    const refused = await train([...tiny, "--steps", "1", "--no-export", "--out", dir]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/--out '.*' is not empty \(1 entry: 'notes.txt'\) and holds no run: choose a new or empty directory, or pass --overwrite/);
    expect(fs.readdirSync(dir)).toEqual(["notes.txt"]);
    const written = await train([...tiny, "--steps", "1", "--no-export", "--out", dir, "--overwrite"]);
    expect(written.code, written.stderr).toBe(0);
    expect(fs.readFileSync(path.join(dir, "notes.txt"), "utf8")).toBe("mine");
  });
});

describe("every check comes before the first write", () => {
  it("bad values leave no run directory behind, and a named backend module is not imported before validation passed", async () => {
    const modules = tempDir("modules-");
    const { module, marker } = evilModule(modules);
    const cases: [string[], RegExp][] = [
      [["--keys", "3", "--values", "4", "--vocab", "15"], /--vocab 15 is too small for 3 keys x 4 values \(needs at least 16/],
      [["--mlp-ratio", "0"], /--mlp-ratio must be positive, got 0/],
      [["--mlp-ratio", "0.3"], /MLP width --hidden 16 x --mlp-ratio 0.3 = 4.8 must be a whole number/],
      [["--seed", "1e300"], /--seed must be an integer in \[0, 2\^53 - 1\], got 1e\+300/],
      [["--steps", "1e300"], /--steps must be 0 \(export the model as loaded\) or a positive integer, got 1e\+300/],
      [["--backend", path.join(modules, "missing.mjs")], /--backend '.*missing.mjs': no such file or directory \(ENOENT\)/],
      [["--backend", `${modules}/`], /--backend '.*': is a directory, not a file/],
      [["--backend", module, "--values", "1"], /--values must be at least 2/],
      [
        ["--backend", "mpi"],
        /--backend mpi runs one process per rank, started by mpirun, .*: run it under mpirun -np 2 --bind-to none ulysses-train --backend mpi/,
      ],
      [["--task", "recall", "--data", module], /--data '.*evil.mjs' is for --task text; the recall task reads no data file/],
    ];
    for (const [flags, message] of cases) {
      const out = path.join(root, `never-${crypto.randomUUID()}`);
      const result = await train([...tiny, ...flags, "--steps", flags.includes("--steps") ? flags[flags.indexOf("--steps") + 1]! : "1", "--out", out]);
      expect(result.code, flags.join(" ")).toBe(2);
      expect(result.stderr, flags.join(" ")).toMatch(message);
      expect(fs.existsSync(out), flags.join(" ")).toBe(false);
    }
    expect(fs.existsSync(marker)).toBe(false);
  });

  it("--out on /proc returns at once naming --out; other unusable paths name the flag and the path; so does a missing --resume", async () => {
    const proc = await train([...tiny, "--steps", "1", "--out", "/proc/x"]);
    expect(proc.code).toBe(2);
    expect(proc.stderr).toMatch(/--out '\/proc\/x': that is on the proc pseudo file system, which cannot hold a run directory/);
    expect(proc.ms).toBeLessThan(1000);
    const sys = await train([...tiny, "--steps", "1", "--out", "/sys/x"]);
    expect(sys.stderr).toMatch(/--out '\/sys\/x': that is on the sysfs pseudo file system/);
    const file = path.join(root, "a-file");
    fs.writeFileSync(file, "");
    const underFile = await train([...tiny, "--steps", "1", "--out", path.join(file, "run")]);
    expect(underFile.code).toBe(2);
    expect(underFile.stderr).toMatch(/--out '.*a-file\/run': cannot create the run directory: a parent is not a directory \(ENOTDIR\)/);
    const isFile = await train([...tiny, "--steps", "1", "--out", file]);
    expect(isFile.stderr).toMatch(/--out '.*a-file' exists and is not a directory/);
    const missing = await train(["--resume", "/nonexistent/run"]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/--resume '\/nonexistent\/run': no such file or directory \(ENOENT\)/);
    const empty = tempDir("no-checkpoint-");
    const noCheckpoint = await train(["--resume", empty]);
    expect(noCheckpoint.stderr).toMatch(/--resume '.*': no checkpoint in that directory \('.*checkpoint.safetensors': no such file or directory \(ENOENT\)\)/);
    const notCheckpoint = await train(["--resume", file]);
    expect(notCheckpoint.code).toBe(2);
    expect(notCheckpoint.stderr).toMatch(/--resume '.*a-file': /);
  });
});

describe("crash leftovers", () => {
  it("removes stale checkpoint temporaries at start, and only those", async () => {
    const run = copyOfBase("stale");
    const stale = [".checkpoint.safetensors.tmp-12345-1700000000000-0", ".model.onnx.tmp-1-2-3"];
    for (const name of stale) fs.writeFileSync(path.join(run, name), "partial");
    fs.writeFileSync(path.join(run, ".mine.tmp-1-2-3"), "not ours");
    const result = await train(["--resume", run, "--steps", "3", "--backend", "local"]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toMatch(/removed 2 temporary files an interrupted write left in/);
    for (const name of stale) expect(fs.existsSync(path.join(run, name)), name).toBe(false);
    expect(fs.existsSync(path.join(run, ".mine.tmp-1-2-3"))).toBe(true);
    expect(removeStaleTemporaries(run, RUN_FILES)).toEqual([]);
  });

  it("a torn last metrics line is dropped with a note; a corrupt line in the middle is refused naming the file and line, before config.json is touched", async () => {
    const torn = copyOfBase("torn");
    fs.appendFileSync(path.join(torn, "metrics.jsonl"), '{"step":3,"time":"2025-');
    const result = await train(["--resume", torn, "--steps", "3", "--backend", "local"]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toMatch(/metrics file '.*torn\/metrics.jsonl': line 3 \(\d+ bytes\) is a half-written record from an interrupted run; it is dropped/);
    expect(steps(torn)).toEqual([1, 2, 3]);

    const corrupt = copyOfBase("corrupt");
    const file = path.join(corrupt, "metrics.jsonl");
    fs.writeFileSync(file, `garbage\n${fs.readFileSync(file, "utf8")}`);
    const before = snapshot(corrupt);
    const refused = await train(["--resume", corrupt, "--steps", "3", "--backend", "local"]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/metrics file '.*corrupt\/metrics.jsonl' line 1 is not valid JSON/);
    expect(snapshot(corrupt)).toEqual(before);
  });
});
