/**
 * The options of a documents loader and what they resolve to: the source of
 * the corpus's format, and (with a tokenizer) the encoder that turns its
 * documents into the model's tokens. Shared by DocumentData and its check.
 */
import type { DocumentTokenizer } from "@ulysses/model";
import { TrainingError } from "../errors.js";
import { DEFAULT_CHUNK_BYTES } from "./byte-scanner.js";
import { resolveTextFormat, type DocumentSource, type TextFormatOption } from "./documents.js";
import { JsonlSource } from "./jsonl-source.js";
import type { LongDocuments } from "./packer.js";
import { SeparatedTextSource } from "./text-source.js";
import { DocumentEncoder, type LossOn } from "./tokenized-documents.js";
import { TxtDirSource } from "./txt-dir-source.js";

export interface DocumentDataOptions {
  /** A file (jsonl, chat, text) or a folder (txt-dir). */
  path: string;
  /** Default auto: a folder is txt-dir, *.jsonl is jsonl, else text (chat is never picked by auto). */
  format?: TextFormatOption;
  /** The text format's document separator (required there, refused elsewhere). */
  separator?: string | null;
  /** Documents longer than seq + 1 tokens: split into documents of their own, or continue as one (default split). */
  longDocuments?: LongDocuments;
  /** Skip and count bad documents instead of throwing (default false). */
  skipBadDocuments?: boolean;
  /** Documents the shuffle buffer holds (default 64; 1: corpus order). */
  shuffleBuffer?: number;
  /** Bytes per read (default 1 MiB). */
  chunkBytes?: number;
  /** Longest JSONL line (default 64 MiB). */
  maxLineBytes?: number;
  /** The model's tokenizer: documents become its tokens (absent: UTF-8 bytes; the chat format needs one). */
  tokenizer?: DocumentTokenizer;
  /** Which tokens are loss targets: assistant (chat only, its default) or all (the default elsewhere). */
  lossOn?: LossOn;
  /** Longest plain document (bytes) read into memory to be tokenized (default 64 MiB). */
  maxDocumentBytes?: number;
}

export function sourceOf(options: DocumentDataOptions): DocumentSource {
  const format = resolveTextFormat(options.path, options.format ?? "auto");
  const separator = options.separator ?? null;
  const common = { chunkBytes: options.chunkBytes ?? DEFAULT_CHUNK_BYTES, skipBadDocuments: options.skipBadDocuments ?? false };
  if (format !== "text" && separator !== null)
    throw new TrainingError(`a document separator (${JSON.stringify(separator)}) is only for the text format; '${options.path}' is read as ${format}`);
  if (format === "chat" && options.tokenizer === undefined)
    throw new TrainingError(`chat data '${options.path}' needs the model's tokenizer (its chat template); byte-level training reads text formats only`);
  if (format === "jsonl" || format === "chat") return new JsonlSource(options.path, { ...common, maxLineBytes: options.maxLineBytes, chat: format === "chat" });
  if (format === "txt-dir") return new TxtDirSource(options.path, common);
  if (separator === null)
    throw new TrainingError(`plain text '${options.path}' has no documents without a separator (give one, or read it as one stream with ByteTextData)`);
  return new SeparatedTextSource(options.path, separator, common);
}

/** The encoder of `options` over `source`, or null for byte-level documents. */
export function encoderOf(options: DocumentDataOptions, source: DocumentSource): DocumentEncoder | null {
  if (options.tokenizer === undefined) {
    if (options.lossOn !== undefined && options.lossOn !== "all")
      throw new TrainingError(
        `loss on ${options.lossOn} tokens needs the model's tokenizer and chat data ('${options.path}' is read as ${source.format} bytes)`,
      );
    return null;
  }
  return new DocumentEncoder(options.tokenizer, source, options.lossOn ?? (source.format === "chat" ? "assistant" : "all"), options.maxDocumentBytes);
}

/** True when `options` read documents (jsonl, chat, txt-dir, or text with a separator); plain text without one is ByteTextData's stream. */
export function readsDocuments(options: Pick<DocumentDataOptions, "path" | "format" | "separator">): boolean {
  const format = resolveTextFormat(options.path, options.format ?? "auto");
  return format !== "text" || (options.separator ?? null) !== null;
}
