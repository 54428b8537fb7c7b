import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { Rng } from "@ulysses/tensors";
import { IGNORE_INDEX } from "./batch.js";
import { DocumentData, readsDocuments, type DocumentDataOptions } from "./document-data.js";
import type { LongDocuments, PackedBatch } from "./packer.js";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "document-data-"));
const SEQ = 64;
const SEPARATOR = "<|doc|>";

/** 200 documents of mixed lengths (1 to ~400 bytes, some multi-byte characters), from a fixed LCG. */
function fixtureTexts(): string[] {
  let s = 12345;
  const next = () => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return s / 2 ** 32;
  };
  const alphabet = "abcdefghijklmnopqrstuvwxyz  .,é中\n";
  return Array.from({ length: 200 }, (_, d) => {
    const kind = next();
    const length = kind < 0.05 ? 1 : kind < 0.6 ? 2 + Math.floor(next() * 40) : kind < 0.9 ? 40 + Math.floor(next() * 90) : 130 + Math.floor(next() * 270);
    let text = `${d}`.slice(0, length);
    while (text.length < length) text += alphabet[Math.floor(next() * alphabet.length)];
    return text;
  });
}

const texts = fixtureTexts();
const jsonl = path.join(dir, "corpus.jsonl");
fs.writeFileSync(jsonl, texts.map((text) => `${JSON.stringify({ text, n: 1 })}\n`).join(""));
const separated = path.join(dir, "corpus.txt");
fs.writeFileSync(separated, texts.join(SEPARATOR));
const folder = path.join(dir, "corpus");
fs.mkdirSync(folder);
texts.forEach((text, i) => fs.writeFileSync(path.join(folder, `doc-${String(i).padStart(3, "0")}.txt`), text));

const formats: [string, DocumentDataOptions][] = [
  ["jsonl", { path: jsonl, chunkBytes: 97 }],
  ["text with a separator", { path: separated, separator: SEPARATOR, chunkBytes: 5 }],
  ["txt-dir", { path: folder, chunkBytes: 33 }],
];

function seeded(seed: number): Rng {
  return new Rng(seed, 1_000_003);
}

function take(data: DocumentData, rng: Rng, count: number, rows = 3): PackedBatch[] {
  return Array.from({ length: count }, () => data.batch(rows, SEQ, () => rng.uniform()));
}

const plain = (batch: PackedBatch) => [batch.tokens.data, batch.labels.data, batch.documents.ids.data, batch.documents.positions.data].map((t) => [...t]);

/** Checks a batch against the rules, independently of the packer; returns its (input, label) pairs in row order. */
function checkRules(batch: PackedBatch, mode: LongDocuments): [number, number][] {
  const [rows, seq] = batch.tokens.shape as [number, number];
  const pairs: [number, number][] = [];
  const problems: string[] = [];
  const documents = new Set<number>();
  let padding = 0;
  for (let r = 0; r < rows; r++) {
    const at = (t: { data: Int32Array }, i: number) => t.data[r * seq + i]!;
    for (let i = 0; i < seq; i++) {
      const where = `row ${r} token ${i}`;
      const id = at(batch.documents.ids, i);
      const token = at(batch.tokens, i);
      const label = at(batch.labels, i);
      const position = at(batch.documents.positions, i);
      // the fixture has no NUL byte: token 0 is padding
      if (token === 0) {
        padding++;
        if (label !== IGNORE_INDEX) problems.push(`${where}: padding with label ${label}`);
      } else documents.add(id);
      if (i > 0) {
        const previous = at(batch.documents.ids, i - 1);
        if (id < previous) problems.push(`${where}: id ${id} after ${previous}`);
        const expected = id === previous ? at(batch.documents.positions, i - 1) + 1 : 0;
        if (position !== expected) problems.push(`${where}: position ${position}, expected ${expected}`);
      } else if (mode === "split" && position !== 0) {
        problems.push(`${where}: split row starts at position ${position}`);
      }
      // the shift never crosses a document: a document's last token predicts nothing
      if (i < seq - 1 && at(batch.documents.ids, i + 1) !== id && label !== IGNORE_INDEX)
        problems.push(`${where}: last token of a document has label ${label}`);
      if (i < seq - 1 && label !== IGNORE_INDEX && label !== at(batch.tokens, i + 1)) problems.push(`${where}: label ${label} is not the next token`);
      if (label !== IGNORE_INDEX) pairs.push([token, label]);
    }
  }
  expect(problems.slice(0, 5)).toEqual([]);
  expect(batch.stats.paddingTokens).toBe(padding);
  expect(batch.stats.padding).toBeCloseTo(padding / (rows * seq), 12);
  expect(batch.stats.documents).toBe(documents.size);
  return pairs;
}

/** Every adjacent byte pair of the documents in corpus order, over `epochs` passes. */
function corpusPairs(epochs: number): [number, number][] {
  const out: [number, number][] = [];
  for (let e = 0; e < epochs; e++) {
    for (const text of texts) {
      const bytes = Buffer.from(text, "utf8");
      for (let k = 0; k + 1 < bytes.length; k++) out.push([bytes[k]!, bytes[k + 1]!]);
    }
  }
  return out;
}

describe("packed documents from a 200-document corpus", () => {
  it.each(["split", "continue"] as const)("in corpus order, %s: trains every adjacent pair of every document once, in order", (mode) => {
    const data = new DocumentData({ path: jsonl, shuffleBuffer: 1, longDocuments: mode });
    const pairs = take(data, seeded(1), 100).flatMap((b) => checkRules(b, mode));
    const expected = corpusPairs(2);
    expect(pairs.length).toBeGreaterThan(expected.length / 2 + 100); // more than one epoch
    expect(pairs).toEqual(expected.slice(0, pairs.length));
  });

  it("packs the same batches from JSONL, separated text and a .txt folder holding the same documents", () => {
    const batches = formats.map(([, options]) => take(new DocumentData({ ...options, shuffleBuffer: 8 }), seeded(5), 12).map(plain));
    expect(batches[1]).toEqual(batches[0]);
    expect(batches[2]).toEqual(batches[0]);
  });

  it("counts documents and padding per batch", () => {
    const stats = take(new DocumentData({ path: jsonl }), seeded(2), 20).map((b) => checkRules(b, "split") && b.stats);
    expect(stats.some((s) => s.paddingTokens > 0)).toBe(true);
    expect(stats.every((s) => s.documents >= 3)).toBe(true);
  });

  it("is fixed by the data RNG: the same seed on every rank packs the same stream, another seed another", () => {
    const rank0 = take(new DocumentData({ path: jsonl }), seeded(7), 6).map(plain);
    const rank1 = take(new DocumentData({ path: jsonl }), seeded(7), 6).map(plain);
    const other = take(new DocumentData({ path: jsonl }), seeded(8), 6).map(plain);
    expect(rank1).toEqual(rank0);
    expect(other).not.toEqual(rank0);
  });

  it.each(formats)("%s: resumes from a JSON state and the RNG state into the same stream", (_, options) => {
    for (const mode of ["split", "continue"] as const) {
      const straight = take(new DocumentData({ ...options, longDocuments: mode }), seeded(3), 14).map(plain);
      const first = new DocumentData({ ...options, longDocuments: mode });
      const rng = seeded(3);
      const before = take(first, rng, 5).map(plain);
      const saved = JSON.parse(JSON.stringify({ data: first.state(), rng: rng.getState() }));
      const resumed = new DocumentData({ ...options, longDocuments: mode });
      resumed.restore(saved.data);
      const after = take(resumed, seeded(0).setState(saved.rng), 9).map(plain);
      expect([...before, ...after]).toEqual(straight);
    }
  });

  it("refuses a state of another corpus or a malformed one, naming the difference", () => {
    const state = new DocumentData({ path: jsonl }).state();
    const separatedData = new DocumentData({ path: separated, separator: SEPARATOR });
    expect(() => separatedData.restore(state)).toThrow(/data state is for a jsonl corpus of 1 files and \d+ bytes, but '.*corpus\.txt' is text/);
    expect(() => separatedData.restore({ ...state, buffer: [{ file: 0 }] })).toThrow(/not a documents state \(buffer\)/);
    expect(() => separatedData.restore("nonsense")).toThrow(/not a documents state \(not an object\)/);
  });
});

describe("DocumentData.check", () => {
  it.each(formats)("%s: counts the documents", (_, options) => {
    const check = DocumentData.check(options);
    expect(check).toMatchObject({ documents: 200, skipped: 0, complete: true });
    expect(check.files).toBe(options.path === folder ? 200 : 1);
    const partial = DocumentData.check(options, 500);
    expect(partial.complete).toBe(false);
    expect(partial.documents).toBeLessThan(200);
  });

  it("names bad documents, skips and counts them when asked, and refuses a corpus with nothing to predict", () => {
    const bad = path.join(dir, "bad.jsonl");
    fs.writeFileSync(bad, '{"text": "fine"}\n{"text": null}\n{"text": "also fine"}\n{oops\n');
    expect(() => DocumentData.check({ path: bad })).toThrow(/JSONL file '.*bad\.jsonl' line 2: "text" must be a string, got null/);
    expect(DocumentData.check({ path: bad, skipBadDocuments: true })).toMatchObject({ documents: 2, skipped: 2 });
    const data = new DocumentData({ path: bad, skipBadDocuments: true });
    take(data, seeded(1), 2);
    expect(data.skipped.count).toBeGreaterThanOrEqual(2);
    const tiny = path.join(dir, "tiny.txt");
    fs.writeFileSync(tiny, "a|b|c");
    expect(() => DocumentData.check({ path: tiny, separator: "|" })).toThrow(/text file '.*tiny\.txt' holds no document of 2 or more tokens/);
    const allBad = path.join(dir, "all-bad.jsonl");
    fs.writeFileSync(allBad, '{"text": ""}\n{"x": 1}\n');
    expect(() => DocumentData.check({ path: allBad, skipBadDocuments: true })).toThrow(/holds no documents \(2 bad documents skipped; the first: .*line 1/);
    expect(() => take(new DocumentData({ path: allBad, skipBadDocuments: true }), seeded(1), 1)).toThrow(/holds no usable documents \(2 bad ones skipped\)/);
  });

  it("refuses options that do not fit the path", () => {
    expect(() => DocumentData.check({ path: jsonl, separator: "\n" })).toThrow(
      /separator \("\\n"\) is only for the text format; '.*corpus\.jsonl' is read as jsonl/,
    );
    expect(() => DocumentData.check({ path: separated })).toThrow(/plain text '.*corpus\.txt' has no documents without a separator/);
    expect(() => DocumentData.check({ path: jsonl, format: "csv" as "text" })).toThrow(/unknown text data format 'csv'/);
    expect(() => DocumentData.check({ path: jsonl, longDocuments: "wrap" as "split" })).toThrow(/long documents must be split or continue, got 'wrap'/);
    expect(readsDocuments({ path: separated })).toBe(false);
    expect(readsDocuments({ path: separated, separator: "\n" })).toBe(true);
    expect(readsDocuments({ path: folder })).toBe(true);
  });
});
