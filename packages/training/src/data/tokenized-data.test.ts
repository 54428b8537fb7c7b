/**
 * Tokenized documents with Qwen3's real tokenizer: JSONL, text with a
 * separator and a .txt folder holding the same documents pack into rows
 * whose tokens are the reference tokenizer's ids of each document followed
 * by EOS (Qwen3 has no BOS), with document ids, positions and labels as for
 * bytes; long documents split or continue and still train every adjacent
 * pair once; the stream resumes from its JSON state; check counts tokens.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { HfTokenizer } from "@ulysses/model";
import { Rng } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { encode, expectedPairs, fixtureTexts, QWEN3_DIR, tokenId, trainedPairs, walkWholeDocuments, type Expected } from "../testing-fixtures/qwen3-data.js";
import { DocumentData, type DocumentDataOptions } from "./document-data.js";
import type { PackedBatch } from "./packer.js";

const tokenizer = HfTokenizer.load(QWEN3_DIR);
const EOS = tokenId("<|im_end|>");
const PAD = tokenId("<|endoftext|>");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tokenized-data-"));
const SEPARATOR = "\n<|doc|>\n";
const texts = fixtureTexts(60, 4242);
const docs: Expected[] = texts.map((text) => {
  const ids = [...encode(text), EOS];
  return { ids, trainable: ids.map(() => 1) };
});
const longest = Math.max(...docs.map((d) => d.ids.length));

const jsonl = path.join(dir, "corpus.jsonl");
fs.writeFileSync(jsonl, texts.map((text) => `${JSON.stringify({ text })}\n`).join(""));
const separated = path.join(dir, "corpus.txt");
fs.writeFileSync(separated, texts.join(SEPARATOR));
const folder = path.join(dir, "corpus");
fs.mkdirSync(folder);
texts.forEach((text, i) => fs.writeFileSync(path.join(folder, `doc-${String(i).padStart(3, "0")}.txt`), text));
const formats: [string, DocumentDataOptions][] = [
  ["jsonl", { path: jsonl, tokenizer, chunkBytes: 97 }],
  ["text with a separator", { path: separated, separator: SEPARATOR, tokenizer, chunkBytes: 7 }],
  ["txt-dir", { path: folder, tokenizer, chunkBytes: 33 }],
];

const take = (data: DocumentData, rng: Rng, count: number, rows: number, seq: number): PackedBatch[] =>
  Array.from({ length: count }, () => data.batch(rows, seq, () => rng.uniform()));
const plain = (b: PackedBatch) => [b.tokens.data, b.labels.data, b.documents.ids.data, b.documents.positions.data].map((t) => [...t]);

describe("tokenized documents (Qwen3)", () => {
  it.each(formats)("%s: rows hold each document's reference ids then EOS, in corpus order, with ids, positions and labels", (_, options) => {
    const data = new DocumentData({ ...options, shuffleBuffer: 1 });
    expect(data.vocabSize).toBe(tokenizer.vocabSize);
    const seq = longest + 8;
    const batches = take(data, new Rng(1, 1_000_003), 12, 2, seq);
    expect(walkWholeDocuments(batches, docs, PAD)).toBeGreaterThan(docs.length); // more than an epoch
    expect(batches.some((b) => b.stats.paddingTokens > 0)).toBe(true);
  });

  it.each(["split", "continue"] as const)("long documents, %s: every adjacent pair of every document trained once, in order", (mode) => {
    const data = new DocumentData({ path: jsonl, tokenizer, shuffleBuffer: 1, longDocuments: mode });
    const pairs = take(data, new Rng(1, 1_000_003), 40, 4, 16).flatMap(trainedPairs);
    const expected = expectedPairs(docs, 3);
    expect(pairs.length).toBeGreaterThan(expected.length / 3 + 50);
    expect(pairs).toEqual(expected.slice(0, pairs.length));
  });

  it.each(formats)("%s: resumes from its JSON state and the RNG state into the same stream", (_, options) => {
    for (const mode of ["split", "continue"] as const) {
      const straight = take(new DocumentData({ ...options, longDocuments: mode, shuffleBuffer: 6 }), new Rng(3, 1_000_003), 10, 2, 24).map(plain);
      const first = new DocumentData({ ...options, longDocuments: mode, shuffleBuffer: 6 });
      const rng = new Rng(3, 1_000_003);
      const before = take(first, rng, 4, 2, 24).map(plain);
      const saved = JSON.parse(JSON.stringify({ data: first.state(), rng: rng.getState() }));
      expect(saved.data.tokens).toEqual({ vocabSize: tokenizer.vocabSize, lossOn: "all" });
      const resumed = new DocumentData({ ...options, longDocuments: mode, shuffleBuffer: 6 });
      resumed.restore(saved.data);
      const after = take(resumed, new Rng(0, 1_000_003).setState(saved.rng), 6, 2, 24).map(plain);
      expect([...before, ...after]).toEqual(straight);
      // a byte-level loader refuses a tokenized state, and the other way round
      expect(() => new DocumentData({ ...options, tokenizer: undefined }).restore(saved.data)).toThrow(
        `data state is for documents of a ${tokenizer.vocabSize}-token vocabulary with loss on all, but this loader reads bytes`,
      );
      const byteState = new DocumentData({ ...options, tokenizer: undefined }).state();
      expect(() => resumed.restore(byteState)).toThrow(/data state is for byte-level documents, but this loader reads a \d+-token vocabulary/);
    }
  });

  it.each(formats)("%s: check counts documents, tokens and targets as the reference tokenizes them", (_, options) => {
    const check = DocumentData.check(options);
    const tokens = docs.reduce((n, d) => n + d.ids.length, 0);
    expect(check).toMatchObject({ documents: docs.length, skipped: 0, complete: true, tokens, targets: tokens - docs.length });
  });

  it("refuses loss on assistant for plain documents, and chat data without a tokenizer", () => {
    expect(() => new DocumentData({ path: jsonl, tokenizer, lossOn: "assistant" })).toThrow(
      /loss on assistant tokens is for chat data, but '.*corpus\.jsonl' is read as jsonl/,
    );
    expect(() => DocumentData.check({ path: jsonl, format: "chat" })).toThrow(/chat data '.*corpus\.jsonl' needs the model's tokenizer/);
    expect(() => new DocumentData({ path: jsonl, lossOn: "assistant" })).toThrow(/loss on assistant tokens needs the model's tokenizer and chat data/);
  });
});
