#!/usr/bin/env node
// Every shell block of every README.md runs as written on a fresh machine
// with only Node 20 (no global pnpm). Each ```sh block is preceded by a marker:
//
//   <!-- readme-check: run -->             run here, in the repository root
//   <!-- readme-check: run in DIR -->      run in DIR, relative to the root (e.g. ../my-app)
//   <!-- readme-check: skip: REASON -->    not run (long benchmarks, other hardware); the reason is printed
//
// Blocks marked run are executed in file order (root README first), each as
// one `bash -eo pipefail` script with a time limit; the first failure stops
// the check naming the file, line and command. Every block, run or not, is
// also read for commands that cannot work on that machine: a bare `pnpm`
// (there is no global pnpm), `npx pnpm@...` without -y (it prompts), an
// `npm i @ulysses/...` from the registry (the packages are not published),
// and `npx -y pnpm@V NAME` where NAME is no script of the root package.json.
// What the run blocks create in the root, in its parent and in runs/ is
// removed afterwards. Usage: node scripts/check-readme-commands.mjs [--static]
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const PNPM = "npx -y pnpm@12.4.2";
/** pnpm's own commands a README may use. */
const PNPM_COMMANDS = new Set(["install", "i", "add", "pack", "exec", "run", "test", "rebuild", "--filter", "-r", "--recursive", "-C", "--dir"]);
const BLOCK_LIMIT_S = 900;

/** The README files of the repository, the root one first. */
export function readmeFiles(dir = root) {
  const listed = spawnSync("git", ["ls-files", "*README.md"], { cwd: dir, encoding: "utf8" }).stdout.split("\n").filter(Boolean);
  return ["README.md", ...listed.filter((f) => f !== "README.md").sort()].filter((f) => existsSync(join(dir, f)));
}

/** The ```sh blocks of a README: { file, line, marker, text } (marker null when missing). */
export function shellBlocks(file, text) {
  const lines = text.split("\n");
  const blocks = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].trim() !== "```sh") continue;
    const end = lines.findIndex((l, j) => j > i && l.trim() === "```");
    if (end < 0) throw new Error(`${file}:${i + 1}: a sh block that never closes`);
    let before = i - 1;
    while (before >= 0 && lines[before].trim() === "") before--;
    const match = before >= 0 ? /^<!-- readme-check: (run(?: in (\S+))?|skip: (.+?)) -->$/.exec(lines[before].trim()) : null;
    const marker = match === null ? null : match[3] !== undefined ? { skip: match[3] } : { run: match[2] ?? "." };
    blocks.push({ file, line: i + 1, marker, text: lines.slice(i + 1, end).join("\n") });
    i = end;
  }
  return blocks;
}

/** Commands of a block: continuation lines joined, comments and blank lines dropped. */
function commands(text) {
  return text
    .replace(/\\\n/g, " ")
    .split("\n")
    .map((l) => l.replace(/(^|\s)#.*$/, "").trim())
    .filter(Boolean);
}

/** Why each command of a block cannot work on a fresh machine (none: []). */
export function staticProblems(block, scripts) {
  const problems = [];
  for (const command of commands(block.text)) {
    for (const part of command.split(/&&|\|\||;|\|/).map((p) => p.trim())) {
      const words = part.split(/\s+/).filter((w) => !/^[A-Z_]+=/.test(w));
      if (words[0] === "pnpm") problems.push(`'${part}': there is no global pnpm on a fresh machine; write ${PNPM} ...`);
      if (words[0] === "npx" && /^pnpm@/.test(words[1] ?? "")) problems.push(`'${part}': npx without -y asks before installing pnpm; write ${PNPM} ...`);
      if (words[0] === "npm" && ["i", "install", "add"].includes(words[1]) && words.slice(2).some((w) => w.startsWith("@ulysses/")))
        problems.push(`'${part}': the @ulysses packages are not on the npm registry; install the tarballs of scripts/pack-packages.mjs`);
      if (words[0] === "npx" && words[1] === "-y" && /^pnpm@/.test(words[2] ?? "")) {
        const name = words[3];
        if (name !== undefined && !PNPM_COMMANDS.has(name) && !name.startsWith("-") && !(name in scripts))
          problems.push(`'${part}': '${name}' is no script of the root package.json`);
      }
    }
  }
  return problems;
}

function entries(dir) {
  return existsSync(dir) ? new Set(readdirSync(dir)) : new Set();
}

function main() {
  const staticOnly = process.argv.includes("--static");
  const scripts = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).scripts ?? {};
  const blocks = readmeFiles().flatMap((file) => shellBlocks(file, readFileSync(join(root, file), "utf8")));
  const problems = [];
  for (const block of blocks) {
    if (block.marker === null) problems.push(`${block.file}:${block.line}: a sh block without <!-- readme-check: run --> or <!-- readme-check: skip: why -->`);
    for (const p of staticProblems(block, scripts)) problems.push(`${block.file}:${block.line}: ${p}`);
  }
  if (problems.length > 0) {
    process.stderr.write(`check-readme-commands:\n  ${problems.join("\n  ")}\n`);
    process.exit(1);
  }
  const toRun = blocks.filter((b) => b.marker.run !== undefined);
  for (const b of blocks.filter((b) => b.marker.skip !== undefined)) process.stdout.write(`skip ${b.file}:${b.line}: ${b.marker.skip}\n`);
  if (staticOnly) {
    process.stdout.write(`check-readme-commands: ${blocks.length} blocks read, ${toRun.length} to run (--static: none run)\n`);
    return;
  }
  const parent = dirname(root);
  const before = { root: entries(root), parent: entries(parent), runs: entries(join(root, "runs")) };
  let failed = null;
  const started = Date.now();
  try {
    for (const block of toRun) {
      const cwd = resolve(root, block.marker.run);
      const t0 = Date.now();
      const run = spawnSync("bash", ["-eo", "pipefail", "-c", block.text], {
        cwd,
        stdio: ["ignore", "pipe", "pipe"],
        encoding: "utf8",
        timeout: BLOCK_LIMIT_S * 1000,
        maxBuffer: 256 * 1024 * 1024,
        env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" },
      });
      const seconds = ((Date.now() - t0) / 1000).toFixed(0);
      if (run.status !== 0) {
        failed = `${block.file}:${block.line} (in ${block.marker.run}) exited ${run.status ?? run.signal} after ${seconds} s:\n${block.text}\n--- last output ---\n${`${run.stdout}\n${run.stderr}`.trim().split("\n").slice(-25).join("\n")}`;
        break;
      }
      process.stdout.write(`ran ${block.file}:${block.line} in ${seconds} s\n`);
    }
  } finally {
    for (const [dir, had] of [
      [root, before.root],
      [parent, before.parent],
      [join(root, "runs"), before.runs],
    ])
      for (const name of entries(dir)) if (!had.has(name)) rmSync(join(dir, name), { recursive: true, force: true });
  }
  if (failed !== null) {
    process.stderr.write(`check-readme-commands: ${failed}\n`);
    process.exit(1);
  }
  process.stdout.write(
    `check-readme-commands: ${toRun.length} blocks run as written in ${((Date.now() - started) / 1000).toFixed(0)} s, ${blocks.length - toRun.length} skipped with a reason\n`,
  );
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
