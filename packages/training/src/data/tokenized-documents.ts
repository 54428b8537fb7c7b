/**
 * Documents as a model's tokens: each source document is encoded by a
 * DocumentTokenizer when it enters the shuffle buffer (never the corpus up
 * front), so memory holds at most the buffer's documents. Plain text (jsonl,
 * txt-dir, text with a separator) goes through encodeDocument (BOS/EOS by the
 * tokenizer's rule), a chat line through encodeChat. The loss mask: lossOn
 * "assistant" (the default for chat, chat only) trains the assistant tokens
 * the tokenizer marks; "all" trains every token. Encoding is deterministic,
 * so a restored stream re-encodes its documents and token offsets stay valid.
 * A document that cannot be encoded (a conversation the chat template cannot
 * render or split, one with nothing to train, no tokens at all, a plain
 * document over `maxDocumentBytes`) is a bad document: it names the file and
 * line, or is skipped and counted.
 */
import { ModelError, type DocumentTokenizer, type TokenizedDocument } from "@ulysses/model";
import { TrainingError } from "../errors.js";
import type { DocumentSource, SourceDocument } from "./documents.js";

export type LossOn = "assistant" | "all";
export const LOSS_ON: readonly LossOn[] = ["assistant", "all"];
/** Longest plain document (bytes) read into memory to be tokenized, by default. */
export const DEFAULT_MAX_DOCUMENT_BYTES = 64 << 20;

/** A source document as tokens; `length` counts tokens. */
export interface TokenDocument extends SourceDocument {
  readonly ids: Int32Array;
  /** 1 on loss targets; null: every token is one. */
  readonly trainable: Uint8Array | null;
}

export function isTokenDocument(doc: SourceDocument): doc is TokenDocument {
  return (doc as TokenDocument).ids !== undefined;
}

export class DocumentEncoder {
  private readonly decoder = new TextDecoder("utf-8", { fatal: true });

  constructor(
    readonly tokenizer: DocumentTokenizer,
    private readonly source: DocumentSource,
    readonly lossOn: LossOn,
    private readonly maxDocumentBytes = DEFAULT_MAX_DOCUMENT_BYTES,
  ) {
    if (!LOSS_ON.includes(lossOn)) throw new TrainingError(`loss on must be ${LOSS_ON.join(" or ")}, got '${lossOn}'`);
    if (lossOn === "assistant" && source.format !== "chat")
      throw new TrainingError(`loss on assistant tokens is for chat data, but '${source.files.paths[0]}' is read as ${source.format}`);
    if (!Number.isSafeInteger(maxDocumentBytes) || maxDocumentBytes < 1)
      throw new TrainingError(`the longest document to tokenize must be a positive number of bytes, got ${maxDocumentBytes}`);
  }

  /** `doc` as tokens, or null when it is bad (reported to the source: thrown, or skipped and counted). */
  encode(doc: SourceDocument): TokenDocument | null {
    const result = this.tryEncode(doc);
    if (typeof result !== "string") return result;
    this.source.bad.report(result);
    return null;
  }

  /** `doc` as tokens; throws a TrainingError when it is bad (a document named by a saved state must still encode). */
  encodeOrThrow(doc: SourceDocument): TokenDocument {
    const result = this.tryEncode(doc);
    if (typeof result === "string") throw new TrainingError(`data state names a document that cannot be used: ${result}`);
    return result;
  }

  /** Where `doc` lies, for messages. */
  where(doc: SourceDocument): string {
    const { ref } = doc;
    const file = this.source.files.paths[ref.file];
    if (this.source.format === "jsonl" || this.source.format === "chat") return `JSONL file '${file}' line ${ref.line}`;
    if (this.source.format === "text") return `text file '${file}' document ${ref.line} (bytes ${ref.start}..${ref.end})`;
    return `text file '${file}'`;
  }

  private tryEncode(doc: SourceDocument): TokenDocument | string {
    const where = this.where(doc);
    let encoded: TokenizedDocument;
    try {
      if (doc.messages !== undefined) encoded = this.tokenizer.encodeChat(doc.messages, where);
      else {
        const text = this.text(doc);
        if (typeof text !== "string") return text.problem;
        encoded = this.tokenizer.encodeDocument(text);
      }
    } catch (error) {
      if (error instanceof ModelError) return error.message;
      throw error;
    }
    const { ids } = encoded;
    if (ids.length === 0) return `${where} has no tokens`;
    let trainable: Uint8Array | null = null;
    if (this.lossOn === "assistant") {
      trainable = encoded.trainable ?? null;
      if (trainable === null || trainable.length !== ids.length)
        throw new TrainingError(`the tokenizer gave ${trainable === null ? "no" : trainable.length} trainable flags for the ${ids.length} tokens of ${where}`);
      // token 0 is never a target: nothing comes before it in its document
      if (!trainable.some((flag, i) => i > 0 && flag === 1)) return `${where} has no assistant tokens to train (loss on assistant)`;
    }
    return { ref: { ...doc.ref }, length: ids.length, bytes: null, ids, trainable };
  }

  /** A plain document's text: its bytes (held, or read from its file), decoded as UTF-8. */
  private text(doc: SourceDocument): string | { problem: string } {
    let bytes = doc.bytes;
    if (bytes === null) {
      if (doc.length > this.maxDocumentBytes)
        return { problem: `${this.where(doc)} has ${doc.length} bytes, more than the longest document tokenized (${this.maxDocumentBytes} bytes)` };
      bytes = new Uint8Array(doc.length);
      this.source.files.read(doc.ref.file, doc.ref.start, doc.length, bytes, 0);
      this.source.files.held.note(bytes.length);
    }
    try {
      return this.decoder.decode(bytes);
    } catch {
      return { problem: `${this.where(doc)} is not valid UTF-8` };
    }
  }
}

/** Loss targets among a document's tokens: flags at positions 1.. (every token but the first when all are trainable). */
export function documentTargets(doc: TokenDocument): number {
  if (doc.trainable === null) return doc.length - 1;
  let targets = 0;
  for (let i = 1; i < doc.trainable.length; i++) targets += doc.trainable[i]!;
  return targets;
}
