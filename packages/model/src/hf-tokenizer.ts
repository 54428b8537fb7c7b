/**
 * A Hugging Face tokenizer, read from a model directory: tokenizer.json (the
 * normalizer, pre-tokenizer, model and decoder, run by the maintained
 * @huggingface/tokenizers) and tokenizer_config.json (the special tokens and
 * the chat template). Both are data a user hands us: read only as regular
 * files under a size cap, parsed as JSON, every problem named with the file
 * and the key.
 */
import fs from "node:fs";
import path from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import { ModelError } from "./errors.js";
import { readJsonObject } from "./files/input-files.js";

/** The largest tokenizer.json read (the largest of the common ones, Gemma's, is about 34 MB). */
export const MAX_TOKENIZER_JSON_BYTES = 64 * 1024 * 1024;
/** The largest tokenizer_config.json read (a chat template is a few KB). */
export const MAX_TOKENIZER_CONFIG_BYTES = 16 * 1024 * 1024;

export interface EncodeOptions {
  /** Add the tokens tokenizer.json's post-processor adds (a BOS for Llama); default false. */
  addSpecialTokens?: boolean;
}

export class HfTokenizer {
  /** One more than the largest token id (the model's vocabulary must be at least this). */
  readonly vocabSize: number;
  /** The special tokens of tokenizer_config.json, as ids (null: not set). */
  readonly bos: number | null;
  readonly eos: number | null;
  readonly pad: number | null;
  /** tokenizer_config.json's chat_template (a Jinja template), or null. */
  readonly chatTemplate: string | null;

  private constructor(
    private readonly tokenizer: Tokenizer,
    config: Record<string, unknown>,
    /** Where it was read from, for messages. */
    readonly source: string,
  ) {
    let largest = -1;
    for (const id of tokenizer.get_vocab(true).values()) largest = Math.max(largest, id);
    this.vocabSize = largest + 1;
    const configFile = path.join(source, "tokenizer_config.json");
    const special = (key: "bos_token" | "eos_token" | "pad_token"): number | null => {
      const value = config[key];
      if (value === undefined || value === null) return null;
      const content = typeof value === "string" ? value : (value as { content?: unknown }).content;
      if (typeof content !== "string")
        throw new ModelError(`tokenizer config '${configFile}': ${key} must be a string or {"content": string}, got ${JSON.stringify(value)?.slice(0, 60)}`);
      const id = tokenizer.token_to_id(content);
      if (id === undefined) throw new ModelError(`tokenizer config '${configFile}': ${key} '${content}' is not a token of tokenizer.json`);
      return id;
    };
    this.bos = special("bos_token");
    this.eos = special("eos_token");
    this.pad = special("pad_token");
    const template = config.chat_template;
    if (template !== undefined && template !== null && typeof template !== "string")
      throw new ModelError(`tokenizer config '${configFile}': chat_template must be a string (a list of named templates is not supported)`);
    this.chatTemplate = typeof template === "string" ? template : null;
  }

  /** Reads `dir`/tokenizer.json and, when present, `dir`/tokenizer_config.json. */
  static load(dir: string): HfTokenizer {
    const file = path.join(dir, "tokenizer.json");
    const json = readJsonObject(file, MAX_TOKENIZER_JSON_BYTES, "tokenizer");
    const configFile = path.join(dir, "tokenizer_config.json");
    const config = fs.existsSync(configFile) ? readJsonObject(configFile, MAX_TOKENIZER_CONFIG_BYTES, "tokenizer config") : {};
    let tokenizer: Tokenizer;
    try {
      tokenizer = new Tokenizer(json, config);
    } catch (cause) {
      throw new ModelError(`tokenizer '${file}' cannot be built: ${(cause as Error).message}`, { cause });
    }
    return new HfTokenizer(tokenizer, config, dir);
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    return this.tokenizer.encode(text, { add_special_tokens: options.addSpecialTokens ?? false }).ids;
  }

  /** Text of `ids`; special tokens are kept unless `skipSpecialTokens`. */
  decode(ids: readonly number[], options: { skipSpecialTokens?: boolean } = {}): string {
    return this.tokenizer.decode([...ids], { skip_special_tokens: options.skipSpecialTokens ?? false });
  }

  /** The id of a token as tokenizer.json spells it ("Ġworld", "<|im_end|>"), or null. */
  tokenId(token: string): number | null {
    return this.tokenizer.token_to_id(token) ?? null;
  }
}
