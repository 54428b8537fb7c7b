/**
 * --skip-bad-documents counts what it skips where a user sees it: a CLI run
 * on a JSONL corpus with 3 bad lines (invalid JSON, no string "text", an
 * empty text) among 300 good documents reports 3 in its progress lines, in
 * every metrics.jsonl row (skippedDocuments, cumulative) and in summary.txt.
 * The bad lines sit among the first 64 (the shuffle buffer the first batch
 * fills), and the run takes far fewer documents than the corpus holds, so
 * the stream reads each bad line exactly once.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { spawnTrainer } from "./testing-fixtures/cli.js";

const BAD_LINES = ['{"text": "unterminated', '{"body": "no text key here"}', '{"text": ""}'];
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "skipped-docs-"));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function corpus(): string {
  const words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "home"];
  const lines: string[] = [];
  for (let d = 0; d < 300; d++) lines.push(JSON.stringify({ text: `${words[d % 10]} ${words[(d * 3) % 10]} ${words[(d * 7) % 10]} ${d}.` }));
  // lines 3, 11 and 30 (1-based) are bad
  lines.splice(2, 0, BAD_LINES[0]!);
  lines.splice(10, 0, BAD_LINES[1]!);
  lines.splice(29, 0, BAD_LINES[2]!);
  const file = path.join(dir, "corpus.jsonl");
  fs.writeFileSync(file, `${lines.join("\n")}\n`);
  return file;
}

describe("--skip-bad-documents", () => {
  it("a run reports the number of bad documents it skipped in its progress lines, metrics.jsonl and summary.txt", async () => {
    const out = path.join(dir, "run");
    const flags = { seq: 24, hidden: 16, heads: 2, "kv-heads": 2, layers: 1, batch: 2, threads: 1, steps: 3, warmup: 1, "log-every": 1, "checkpoint-every": 0 };
    const args = [...Object.entries(flags).flatMap(([k, v]) => [`--${k}`, String(v)]), "--data", corpus(), "--skip-bad-documents", "--no-export", "--out", out];
    const run = await spawnTrainer(args);
    const output = `${run.stdout}\n${run.stderr}`;
    expect(run.code, output).toBe(0);
    expect(output).toMatch(/bad documents skipped and counted/);
    const progress = run.stdout.split("\n").filter((line) => /^step \d+\/3 /.test(line));
    expect(progress, output).toHaveLength(3);
    for (const line of progress) expect(line).toMatch(/ skipped 3 /);
    const rows = fs
      .readFileSync(path.join(out, "metrics.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as { skippedDocuments?: number });
    expect(rows.map((r) => r.skippedDocuments)).toEqual([3, 3, 3]);
    expect(fs.readFileSync(path.join(out, "summary.txt"), "utf8")).toMatch(/\| bad documents skipped +\| 3 +\|/);
  }, 60_000);
});
