/**
 * Chat JSONL with Qwen3's real tokenizer and chat template: the labels
 * trained are exactly the assistant tokens (each assistant content and its
 * <|im_end|>), checked against Qwen3's chat format written out by hand and
 * tokenized by the reference, whole, split and continued; loss on all trains
 * every token; the stream resumes from its JSON state; bad lines are refused
 * naming the file and line, or skipped and counted.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { HfTokenizer } from "@ulysses/model";
import { Rng } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { expectedPairs, fixtureConversations, QWEN3_DIR, qwenChat, tokenId, trainedPairs, walkWholeDocuments } from "../testing-fixtures/qwen3-data.js";
import { DocumentData } from "./document-data.js";
import type { PackedBatch } from "./packer.js";

const tokenizer = HfTokenizer.load(QWEN3_DIR);
const PAD = tokenId("<|endoftext|>");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "chat-data-"));
const conversations = fixtureConversations(24);
const docs = conversations.map(qwenChat);
const longest = Math.max(...docs.map((d) => d.ids.length));
const chat = path.join(dir, "chat.jsonl");
fs.writeFileSync(chat, conversations.map((messages, i) => `${JSON.stringify({ id: i, messages })}\n`).join(""));

const take = (data: DocumentData, rng: Rng, count: number, rows: number, seq: number): PackedBatch[] =>
  Array.from({ length: count }, () => data.batch(rows, seq, () => rng.uniform()));
const plain = (b: PackedBatch) => [b.tokens.data, b.labels.data, b.documents.ids.data, b.documents.positions.data].map((t) => [...t]);

describe("chat data (Qwen3 chat template)", () => {
  it("whole conversations: every token as rendered, labels only on assistant targets", () => {
    const data = new DocumentData({ path: chat, format: "chat", tokenizer, shuffleBuffer: 1 });
    const batches = take(data, new Rng(1, 1_000_003), 14, 2, longest + 4);
    expect(walkWholeDocuments(batches, docs, PAD)).toBeGreaterThan(docs.length);
    // the fixture has untrained tokens in every conversation: the mask is not all ones
    expect(docs.every((d) => d.trainable.includes(0) && d.trainable.includes(1))).toBe(true);
  });

  it.each(["split", "continue"] as const)("long conversations, %s: the trained pairs are the assistant targets, in order, once each", (mode) => {
    const data = new DocumentData({ path: chat, format: "chat", tokenizer, shuffleBuffer: 1, longDocuments: mode });
    const pairs = take(data, new Rng(1, 1_000_003), 60, 3, 20).flatMap(trainedPairs);
    const expected = expectedPairs(docs, 3);
    expect(pairs.length).toBeGreaterThan(expected.length / 3 + 20);
    expect(pairs).toEqual(expected.slice(0, pairs.length));
  });

  it("loss on all trains every adjacent pair of the rendered conversations", () => {
    const data = new DocumentData({ path: chat, format: "chat", tokenizer, shuffleBuffer: 1, lossOn: "all" });
    const all = docs.map((d) => ({ ids: d.ids, trainable: d.ids.map(() => 1) }));
    const pairs = take(data, new Rng(1, 1_000_003), 40, 3, 20).flatMap(trainedPairs);
    expect(pairs).toEqual(expectedPairs(all, 2).slice(0, pairs.length));
  });

  it("resumes from its JSON state and the RNG state into the same stream", () => {
    for (const mode of ["split", "continue"] as const) {
      const options = { path: chat, format: "chat" as const, tokenizer, shuffleBuffer: 5, longDocuments: mode };
      const straight = take(new DocumentData(options), new Rng(9, 1_000_003), 12, 2, 32).map(plain);
      const first = new DocumentData(options);
      const rng = new Rng(9, 1_000_003);
      const before = take(first, rng, 5, 2, 32).map(plain);
      const saved = JSON.parse(JSON.stringify({ data: first.state(), rng: rng.getState() }));
      expect(saved.data.pending?.offset ?? 0).toBeGreaterThanOrEqual(0);
      const resumed = new DocumentData(options);
      resumed.restore(saved.data);
      const after = take(resumed, new Rng(0, 1_000_003).setState(saved.rng), 7, 2, 32).map(plain);
      expect([...before, ...after]).toEqual(straight);
      expect(() => new DocumentData({ ...options, lossOn: "all" }).restore(saved.data)).toThrow(
        /with loss on assistant, but this loader reads a \d+-token vocabulary with loss on all/,
      );
    }
  });

  it("check counts conversations, tokens and assistant targets", () => {
    const tokens = docs.reduce((n, d) => n + d.ids.length, 0);
    const targets = docs.reduce((n, d) => n + d.trainable.slice(1).reduce((a, b) => a + b, 0), 0);
    expect(DocumentData.check({ path: chat, format: "chat", tokenizer })).toMatchObject({
      format: "chat",
      documents: docs.length,
      tokens,
      targets,
      skipped: 0,
    });
  });

  it("refuses bad lines naming the file and line, and skips and counts them when asked", () => {
    const good = JSON.stringify({ messages: conversations[1] });
    const lines = [
      good,
      JSON.stringify({ messages: "hello" }),
      JSON.stringify({ messages: [{ role: "user" }] }),
      JSON.stringify({ messages: [{ role: "user", content: [{ type: "text", text: "hi" }] }] }),
      JSON.stringify({ messages: [{ role: "user", content: "hi", tool_calls: [] }] }),
      JSON.stringify({ messages: [{ role: "user", content: "hi" }] }),
      JSON.stringify({ text: "plain" }),
      JSON.stringify({ messages: [], id: 3 }),
      good,
    ];
    const bad = path.join(dir, "bad.jsonl");
    fs.writeFileSync(bad, `${lines.join("\n")}\n`);
    const expected = [
      /: "messages" must be a list of \{"role", "content"\} objects, got the string "hello"/,
      /: messages\[0\] \(user\): "content" must be a string, got nothing/,
      /: messages\[0\] \(user\): "content" must be a string, got a list/,
      /: messages\[0\] \(user\) has "tool_calls": only "role" and "content" are supported/,
      / has no assistant tokens to train \(loss on assistant\)/,
      / has no "messages" field \(keys: text\); a \{"text"\} line is read with the jsonl format/,
      /: "messages" is an empty list/,
    ];
    const where = (n: number) => `JSONL file '${bad}' line ${n}`;
    // refused one at a time: each bad line, on its own after a good one
    lines.slice(1, 8).forEach((line, i) => {
      const one = path.join(dir, `bad-${i}.jsonl`);
      fs.writeFileSync(one, `${good}\n${line}\n`);
      expect(() => DocumentData.check({ path: one, format: "chat", tokenizer })).toThrow(expected[i]!);
      expect(() => DocumentData.check({ path: one, format: "chat", tokenizer })).toThrow(`JSONL file '${one}' line 2`);
    });
    expect(() => DocumentData.check({ path: bad, format: "chat", tokenizer })).toThrow(where(2));
    expect(DocumentData.check({ path: bad, format: "chat", tokenizer, skipBadDocuments: true })).toMatchObject({ documents: 2, skipped: 7 });
    const data = new DocumentData({ path: bad, format: "chat", tokenizer, skipBadDocuments: true, shuffleBuffer: 1 });
    const batch = data.batch(1, docs[1]!.ids.length + 2, () => 0);
    expect(walkWholeDocuments([batch], [docs[1]!], PAD)).toBe(1);
    expect(data.skipped.count).toBe(7);
    expect(data.skipped.examples[0]).toMatch(expected[0]!);
    expect(data.skipped.examples[0]).toContain(where(2));
    expect(() => new DocumentData({ path: bad, format: "chat", tokenizer }).batch(2, 64, () => 0)).toThrow(/line 2: "messages" must be a list/);
  });

  it("a tokenizer without a chat template: each conversation is refused naming its line", () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "no-template-"));
    fs.copyFileSync(path.join(QWEN3_DIR, "tokenizer.json"), path.join(tmp, "tokenizer.json"));
    const bare = HfTokenizer.load(tmp);
    expect(() => DocumentData.check({ path: chat, format: "chat", tokenizer: bare })).toThrow(
      /JSONL file '.*chat\.jsonl' line 1: a conversation needs a chat template, but tokenizer '.*' has none/,
    );
    fs.rmSync(tmp, { recursive: true, force: true });
  });
});
