import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { helpText, parseArgs } from "./args.js";
import { DEFAULTS, textDataOptions, unescapeSeparator, usesDocuments, type TrainConfig } from "./config.js";
import { validateConfig } from "./validate.js";
import { Progress, corpusDigest, summaryRows, type StepMetrics } from "@ulysses/training";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "documents-config-"));
const jsonl = path.join(dir, "corpus.jsonl");
fs.writeFileSync(jsonl, '{"text": "first document"}\n{"text": "second one"}\n');
const plain = path.join(dir, "book.txt");
fs.writeFileSync(plain, "chapter one\n\nchapter two\n\nchapter three, which is longer than the others\n");
const folder = path.join(dir, "docs");
fs.mkdirSync(folder);
fs.writeFileSync(path.join(folder, "b.txt"), "bee");
fs.writeFileSync(path.join(folder, "a.txt"), "ay");

function parse(argv: string[]): TrainConfig {
  const result = parseArgs(argv);
  if (result.help || result.version) throw new Error("unexpected --help or --version");
  return result.config;
}

const problems = (overrides: Partial<TrainConfig>) => {
  try {
    validateConfig({ ...DEFAULTS, seq: 32, task: "text", ...overrides }, {});
    return "";
  } catch (error) {
    return (error as Error).message;
  }
};

describe("document flags", () => {
  it("parses the flags and config keys, with the defaults a recall run has", () => {
    const c = parse(["--data", plain, "--data-format", "text", "--doc-separator", "\\n\\n", "--long-documents=continue", "--skip-bad-documents"]);
    expect([c.task, c.dataFormat, c.docSeparator, c.longDocuments, c.skipBadDocuments]).toEqual(["text", "text", "\\n\\n", "continue", true]);
    expect(textDataOptions(c)).toEqual({ path: plain, format: "text", separator: "\n\n", longDocuments: "continue", skipBadDocuments: true });
    const file = path.join(dir, "run.json");
    fs.writeFileSync(file, JSON.stringify({ data: jsonl, "long-documents": "continue", docSeparator: null }));
    expect(parse(["--config", file])).toMatchObject({ data: jsonl, longDocuments: "continue", docSeparator: null, dataFormat: "auto" });
    expect([DEFAULTS.dataFormat, DEFAULTS.docSeparator, DEFAULTS.longDocuments, DEFAULTS.skipBadDocuments]).toEqual(["auto", null, "split", false]);
  });

  it("reads \\n, \\r, \\t and \\\\ in a separator as escapes", () => {
    expect(unescapeSeparator("\\n\\n")).toBe("\n\n");
    expect(unescapeSeparator("<\\t|\\r\\n|\\\\n>")).toBe("<\t|\r\n|\\n>");
    expect(unescapeSeparator("\\x")).toBe("\\x");
  });

  it("says which runs pack documents", () => {
    const text = { ...DEFAULTS, task: "text" as const };
    expect(usesDocuments({ ...text, data: jsonl })).toBe(true);
    expect(usesDocuments({ ...text, data: folder })).toBe(true);
    expect(usesDocuments({ ...text, data: plain })).toBe(false);
    expect(usesDocuments({ ...text, data: plain, docSeparator: "\\n\\n" })).toBe(true);
    expect(usesDocuments({ ...text, data: plain, dataFormat: "jsonl" })).toBe(true);
    expect(usesDocuments({ ...DEFAULTS })).toBe(false);
  });

  it("accepts each format and names every value that is off, with its flag", () => {
    expect(problems({ data: jsonl })).toBe("");
    expect(problems({ data: folder, longDocuments: "continue" })).toBe("");
    expect(problems({ data: plain, docSeparator: "\\n\\n", skipBadDocuments: true })).toBe("");
    expect(problems({ data: plain })).toBe("");
    expect(problems({ data: jsonl, dataFormat: "csv" as never })).toMatch(/--data-format must be auto, text, jsonl, txt-dir, chat, got 'csv'/);
    expect(problems({ data: jsonl, longDocuments: "wrap" as never })).toMatch(/--long-documents must be split or continue, got 'wrap'/);
    expect(problems({ data: plain, docSeparator: "" })).toMatch(/--doc-separator must be a non-empty string, got ""/);
    expect(problems({ data: jsonl, docSeparator: "\\n" })).toMatch(/--doc-separator "\\\\n" is for plain text, but --data '.*corpus\.jsonl' is read as jsonl/);
    expect(problems({ data: plain, longDocuments: "continue" })).toMatch(
      /--long-documents continue is for documents, but --data '.*book\.txt' is read as one stream/,
    );
    expect(problems({ data: plain, skipBadDocuments: true })).toMatch(/--skip-bad-documents is for documents/);
    expect(problems({ data: folder, dataFormat: "jsonl" })).toMatch(/jsonl needs a regular file, but '.*docs' is a folder/);
    expect(problems({ data: plain, dataFormat: "txt-dir" })).toMatch(/txt-dir needs a folder of \.txt files, but '.*book\.txt' is not a folder/);
    expect(problems({ task: "recall", dataFormat: "jsonl", longDocuments: "continue" })).toMatch(
      /--data-format jsonl, --long-documents continue: for --task text with --data; the recall task reads no data/,
    );
  });

  it("names the file and line of a bad document, or counts it under --skip-bad-documents", () => {
    const bad = path.join(dir, "bad.jsonl");
    fs.writeFileSync(bad, '{"text": "fine"}\n{"text": 42}\n');
    expect(problems({ data: bad })).toMatch(/--data '.*bad\.jsonl' \(jsonl\): JSONL file '.*bad\.jsonl' line 2: "text" must be a string, got number/);
    expect(problems({ data: bad, skipBadDocuments: true })).toBe("");
    const binary = path.join(folder, "c.txt");
    fs.writeFileSync(binary, Buffer.from([0x66, 0xff]));
    expect(problems({ data: folder })).toMatch(/text file '.*docs\/c\.txt' is not valid UTF-8/);
    fs.rmSync(binary);
  });

  it("digests a folder's .txt files in chunks, and a file as its bytes", () => {
    expect(corpusDigest(plain)).toEqual({ bytes: fs.statSync(plain).size, sha256: createHash("sha256").update(fs.readFileSync(plain)).digest("hex") });
    const expected = createHash("sha256").update("a.txt\0").update("ay").update("b.txt\0").update("bee").digest("hex");
    expect(corpusDigest(folder)).toEqual({ bytes: 5, sha256: expected });
  });

  it("documents the formats in --help", () => {
    const help = helpText();
    expect(help).toMatch(
      /--data-format <value>\s+auto \(a folder: txt-dir, \*\.jsonl: jsonl, else text\) \|\s+text\s+\|\s+jsonl\s+\|\s+txt-dir\s+\|\s+chat\s+\(JSONL of[\s\S]*?chat template;\s+needs --model or --model-config\)\s+\(default\s+auto\)/,
    );
    expect(help).toMatch(/--long-documents <value>[\s\S]*?\(default\s+split\)/);
    expect(help).toMatch(/--skip-bad-documents/);
    expect(help).toMatch(/jsonl {4}one \{"text": "..."\} object per line/);
  });
});

describe("documents and padding in the reports", () => {
  const row = (step: number, documents?: number, padding?: number): StepMetrics => ({
    step,
    time: new Date(0).toISOString(),
    loss: 2,
    lr: 1e-3,
    gradNorm: 0,
    tokensPerSec: 100,
    stepMs: 10,
    computeMs: 9,
    commMs: 1,
    commBytesPerRank: 0,
    peakRssBytes: 0,
    mfu: 0,
    ...(documents === undefined ? {} : { documents, padding }),
  });

  it("summary.txt gains the mean documents per step and padding when documents are in use", () => {
    const rows = new Map(summaryRows([row(1, 10, 0.1), row(2, 14, 0.2), row(3, 12, 0.3)], { setup: "s", wallSeconds: 1, outDir: "/r" }));
    expect(rows.get("documents per step (mean)")).toBe("12.0");
    expect(rows.get("padding (mean)")).toBe("20.0% of tokens");
    expect(new Map(summaryRows([row(1), row(2)], { setup: "s", wallSeconds: 1, outDir: "/r" })).has("padding (mean)")).toBe(false);
  });

  it("the progress line shows them", () => {
    let written = "";
    const stream = { write: (text: string) => (written += text) } as unknown as NodeJS.WriteStream;
    const progress = new Progress(2, 0, 1, stream, false);
    progress.update(row(1, 7, 0.125));
    progress.update(row(2));
    const [withDocs, without] = written.trim().split("\n");
    expect(withDocs).toMatch(/^step 1\/2 loss 2\.0000 docs 7 pad 12\.5% lr/);
    expect(without).not.toMatch(/docs/);
  });
});
