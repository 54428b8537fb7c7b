#!/usr/bin/env node
// Every tracked TypeScript file stays under the line limit of contributing/README.md
// (run by .ci/run):
//
//   node scripts/check-file-sizes.mjs [--max N] [--root DIR]
//
// Reads the files git tracks (`git ls-files '*.ts' '*.mts' '*.cts'` in DIR, default
// the repository), counts their lines and prints one line per file over N (default
// 400) with its count. Exit 1 when any file is over, 0 otherwise.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const { values } = parseArgs({ options: { max: { type: "string", default: "400" }, root: { type: "string" } } });
const max = Number(values.max);
if (!Number.isSafeInteger(max) || max < 1) {
  console.error(`check-file-sizes: --max must be a positive integer, got '${values.max}'`);
  process.exit(2);
}
const root = resolve(values.root ?? fileURLToPath(new URL("..", import.meta.url)));
const files = execFileSync("git", ["ls-files", "-z", "*.ts", "*.mts", "*.cts"], { cwd: root, encoding: "utf8" }).split("\0").filter(Boolean);

/** Lines of a file as an editor counts them (a last line without a newline counts). */
function lineCount(text) {
  if (text === "") return 0;
  const newlines = text.split("\n").length - 1;
  return text.endsWith("\n") ? newlines : newlines + 1;
}

const over = files
  .map((file) => ({ file, lines: lineCount(readFileSync(join(root, file), "utf8")) }))
  .filter(({ lines }) => lines > max)
  .sort((a, b) => b.lines - a.lines);
for (const { file, lines } of over) console.error(`${file}: ${lines} lines (at most ${max})`);
if (over.length > 0) {
  console.error(`check-file-sizes: ${over.length} file(s) over ${max} lines: split them by concern`);
  process.exit(1);
}
console.log(`check-file-sizes: ${files.length} TypeScript files, none over ${max} lines`);
