/**
 * A Hugging Face tokenizer, read from a model directory: tokenizer.json (the
 * normalizer, pre-tokenizer, model and decoder, run by the maintained
 * @huggingface/tokenizers) and tokenizer_config.json (the special tokens and
 * the chat template). Both are data a user hands us: read only as regular
 * files under a size cap, parsed as JSON, every problem named with the file
 * and the key.
 *
 * As a DocumentTokenizer it turns training documents into ids. A plain
 * document is [BOS] + its text's ids + [EOS]: BOS when tokenizer_config.json
 * names a bos_token and does not set add_bos_token to false (Llama, Mistral,
 * Gemma: yes; Qwen, whose bos_token is null: no), EOS when it names an
 * eos_token. A conversation is rendered with chat_template through
 * @huggingface/jinja (messages, bos_token, eos_token, pad_token,
 * add_generation_prompt false; jinja's own raise_exception; no strftime_now, so dated
 * templates take their fixed default date) and tokenized without special
 * tokens added, the template writing them itself; the assistant messages'
 * tokens are marked trainable as chat-spans.ts describes.
 */
import fs from "node:fs";
import path from "node:path";
import { Template } from "@huggingface/jinja";
import { Tokenizer } from "@huggingface/tokenizers";
import { encodeChatSpans } from "./chat-spans.js";
import { ModelError } from "./errors.js";
import { readJsonObject } from "./files/input-files.js";
import type { ChatMessage, DocumentTokenizer, TokenizedDocument } from "./tokenized-document.js";

/** The largest tokenizer.json read (the largest of the common ones, Gemma's, is about 34 MB). */
export const MAX_TOKENIZER_JSON_BYTES = 64 * 1024 * 1024;
/** The largest tokenizer_config.json read (a chat template is a few KB). */
export const MAX_TOKENIZER_CONFIG_BYTES = 16 * 1024 * 1024;

export interface EncodeOptions {
  /** Add the tokens tokenizer.json's post-processor adds (a BOS for Llama); default false. */
  addSpecialTokens?: boolean;
}

export class HfTokenizer implements DocumentTokenizer {
  /** One more than the largest token id (the model's vocabulary must be at least this). */
  readonly vocabSize: number;
  /** The special tokens of tokenizer_config.json, as ids (null: not set). */
  readonly bos: number | null;
  readonly eos: number | null;
  readonly pad: number | null;
  /** tokenizer_config.json's chat_template (a Jinja template), or null. */
  readonly chatTemplate: string | null;
  /** Whether a plain document starts with BOS: a bos_token is set and add_bos_token is not false. */
  readonly addBosToken: boolean;
  /** The text of each added token of tokenizer.json marked special (<|im_end|>, <|eot_id|>, </s>). */
  readonly specialTokens: readonly string[];
  /** The special tokens' text by name, for the chat template (bos_token, eos_token, pad_token). */
  private readonly specialText: Record<string, string> = {};
  private template: Template | null = null;

  private constructor(
    private readonly tokenizer: Tokenizer,
    json: Record<string, unknown>,
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
      this.specialText[key] = content;
      return id;
    };
    this.bos = special("bos_token");
    this.eos = special("eos_token");
    this.pad = special("pad_token");
    const template = config.chat_template;
    if (template !== undefined && template !== null && typeof template !== "string")
      throw new ModelError(`tokenizer config '${configFile}': chat_template must be a string (a list of named templates is not supported)`);
    this.chatTemplate = typeof template === "string" ? template : null;
    const addBos = config.add_bos_token;
    if (addBos !== undefined && addBos !== null && typeof addBos !== "boolean")
      throw new ModelError(`tokenizer config '${configFile}': add_bos_token must be true or false, got ${JSON.stringify(addBos)?.slice(0, 60)}`);
    this.addBosToken = this.bos !== null && addBos !== false;
    this.specialTokens = specialAddedTokens(json, path.join(source, "tokenizer.json"));
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
    return new HfTokenizer(tokenizer, json, config, dir);
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    return this.tokenizer.encode(text, { add_special_tokens: options.addSpecialTokens ?? false }).ids;
  }

  /** Text of `ids`; special tokens are kept unless `skipSpecialTokens`. */
  decode(ids: readonly number[], options: { skipSpecialTokens?: boolean } = {}): string {
    return this.tokenizer.decode([...ids], { skip_special_tokens: options.skipSpecialTokens ?? false });
  }

  /** A plain document's ids: [BOS] + the text's ids + [EOS] (see the top of this file); every token trainable. */
  encodeDocument(text: string): TokenizedDocument {
    const body = this.encode(text);
    const ids = new Int32Array(body.length + (this.addBosToken ? 1 : 0) + (this.eos !== null ? 1 : 0));
    if (this.addBosToken) ids[0] = this.bos!;
    ids.set(body, this.addBosToken ? 1 : 0);
    if (this.eos !== null) ids[ids.length - 1] = this.eos;
    return { ids };
  }

  /** A conversation rendered with the chat template, its assistant messages' tokens trainable; errors start with `where`. */
  encodeChat(messages: readonly ChatMessage[], where: string): TokenizedDocument {
    const template = this.compiledTemplate(where);
    const variables = { ...this.specialText, add_generation_prompt: false };
    return encodeChatSpans(
      {
        render: (list) => template.render({ ...variables, messages: list.map((m) => ({ role: m.role, content: m.content })) }),
        encode: (text) => this.encode(text),
        specialTokens: this.specialTokens,
      },
      messages,
      where,
    );
  }

  private compiledTemplate(where: string): Template {
    if (this.chatTemplate === null)
      throw new ModelError(`${where}: a conversation needs a chat template, but tokenizer '${this.source}' has none (tokenizer_config.json: chat_template)`);
    if (this.template === null) {
      try {
        this.template = new Template(this.chatTemplate);
      } catch (cause) {
        throw new ModelError(
          `tokenizer config '${path.join(this.source, "tokenizer_config.json")}': chat_template cannot be parsed: ${(cause as Error).message}`,
          {
            cause,
          },
        );
      }
    }
    return this.template;
  }

  /** The id of a token as tokenizer.json spells it ("Ġworld", "<|im_end|>"), or null. */
  tokenId(token: string): number | null {
    return this.tokenizer.token_to_id(token) ?? null;
  }
}

/** The content of each entry of tokenizer.json's added_tokens with special: true. */
function specialAddedTokens(json: Record<string, unknown>, file: string): string[] {
  const added = json.added_tokens;
  if (added === undefined || added === null) return [];
  if (!Array.isArray(added)) throw new ModelError(`tokenizer '${file}': added_tokens must be a list`);
  return added.flatMap((entry: unknown, i) => {
    const token = entry as { content?: unknown; special?: unknown } | null;
    if (token === null || typeof token !== "object" || typeof token.content !== "string")
      throw new ModelError(`tokenizer '${file}': added_tokens[${i}] must be an object with a string content`);
    return token.special === true ? [token.content] : [];
  });
}
