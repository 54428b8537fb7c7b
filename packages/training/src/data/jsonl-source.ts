/**
 * JSONL documents: one JSON object per line with a string "text" (other
 * fields are ignored), its UTF-8 bytes the document's tokens. Lines are read
 * in chunks; one line is held at a time (at most `maxLineBytes`). Blank lines
 * are no documents and are passed over; a line that is not valid UTF-8 or
 * JSON, not an object, without a string "text", with an empty "text", or
 * longer than `maxLineBytes` is a bad document, named by file and line.
 * With `chat`, each line holds a conversation instead (chat-lines.ts): the
 * document keeps its messages, for a tokenizer's chat template.
 */
import { TrainingError } from "../errors.js";
import type { ChatMessage } from "@ulysses/model";
import { ByteScanner } from "./byte-scanner.js";
import { chatMessages } from "./chat-lines.js";
import {
  BadDocuments,
  corpusFiles,
  type CorpusFiles,
  type DocumentRef,
  type DocumentSource,
  type SourceCursor,
  type SourceDocument,
  type SourceOptions,
} from "./documents.js";

/** Longest JSONL line read by default (bytes). */
export const DEFAULT_MAX_LINE_BYTES = 64 << 20;

const NEWLINE = new Uint8Array([0x0a]);
const WHITESPACE = /^[\s\uFEFF]*$/;

export interface JsonlOptions extends SourceOptions {
  maxLineBytes?: number;
  /** Lines are {"messages": [...]} conversations (format chat) instead of {"text": "..."}. */
  chat?: boolean;
}

export class JsonlSource implements DocumentSource {
  readonly format: "jsonl" | "chat";
  readonly files: CorpusFiles;
  readonly bad: BadDocuments;
  private readonly scanner: ByteScanner;
  private readonly maxLineBytes: number;
  private readonly decoder = new TextDecoder("utf-8", { fatal: true });
  private readonly encoder = new TextEncoder();
  /** Lines read so far. */
  private line = 0;

  constructor(dataPath: string, options: JsonlOptions = {}) {
    this.format = options.chat === true ? "chat" : "jsonl";
    this.files = corpusFiles(dataPath, this.format, options);
    this.bad = new BadDocuments(options.skipBadDocuments ?? false);
    this.maxLineBytes = options.maxLineBytes ?? DEFAULT_MAX_LINE_BYTES;
    this.scanner = new ByteScanner(this.files.chunkBytes, 0, this.files.held);
    this.seek({ file: 0, offset: 0, line: 0 });
  }

  private get name(): string {
    return this.files.paths[0]!;
  }

  cursor(): SourceCursor {
    return { file: 0, offset: this.scanner.offset, line: this.line };
  }

  seek(cursor: SourceCursor): void {
    this.scanner.open(this.files.fd(0), cursor.offset);
    this.line = cursor.line;
  }

  next(): SourceDocument | null {
    for (;;) {
      if (this.scanner.atEnd()) return null;
      const start = this.scanner.offset;
      const line = ++this.line;
      const pieces: Buffer[] = [];
      let size = 0;
      const { end } = this.scanner.scanUntil(NEWLINE, (bytes) => {
        size += bytes.length;
        if (size <= this.maxLineBytes) pieces.push(Buffer.from(bytes));
      });
      if (size > this.maxLineBytes) {
        this.bad.report(`JSONL file '${this.name}' line ${line} has ${size} bytes, more than the longest line read (${this.maxLineBytes} bytes)`);
        continue;
      }
      const bytes = pieces.length === 1 ? pieces[0]! : Buffer.concat(pieces);
      this.files.held.note(bytes.length);
      const parsed = this.parse(bytes, line);
      if (parsed === null) continue;
      if (typeof parsed === "string") {
        this.bad.report(parsed);
        continue;
      }
      return this.document({ file: 0, start, end, line }, parsed);
    }
  }

  private document(ref: DocumentRef, parsed: Uint8Array | ChatMessage[]): SourceDocument {
    if (parsed instanceof Uint8Array) return { ref, length: parsed.length, bytes: parsed };
    return { ref, length: ref.end - ref.start, bytes: null, messages: parsed };
  }

  load(ref: DocumentRef): SourceDocument {
    const { start, end, line } = ref;
    if (ref.file !== 0 || !(start >= 0 && end >= start && end <= this.files.totalBytes))
      throw new TrainingError(
        `JSONL file '${this.name}' has no line at bytes ${start}..${end} (file ${ref.file}; the file has ${this.files.totalBytes} bytes)`,
      );
    const bytes = new Uint8Array(end - start);
    this.files.read(0, start, end - start, bytes, 0);
    const parsed = this.parse(bytes, line);
    if (parsed === null || typeof parsed === "string")
      throw new TrainingError(`JSONL file '${this.name}' line ${line} (bytes ${start}..${end}) is no longer a document: ${parsed ?? "a blank line"}`);
    return this.document({ file: 0, start, end, line }, parsed);
  }

  /** The document's tokens (chat: its messages), null for a blank line, or what is wrong with the line. */
  private parse(bytes: Uint8Array, line: number): Uint8Array | ChatMessage[] | null | string {
    const where = `JSONL file '${this.name}' line ${line}`;
    let text: string;
    try {
      text = this.decoder.decode(bytes);
    } catch {
      return `${where} is not valid UTF-8`;
    }
    if (WHITESPACE.test(text)) return null;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (cause) {
      return `${where} is not valid JSON (${(cause as Error).message}): ${shorten(text)}`;
    }
    const wanted = this.format === "chat" ? 'a "messages" list' : 'a string "text"';
    if (value === null || typeof value !== "object" || Array.isArray(value))
      return `${where} must be a JSON object with ${wanted}, got ${Array.isArray(value) ? "an array" : value === null ? "null" : typeof value}`;
    if (this.format === "chat") return chatMessages(value, where);
    if (!("text" in value))
      return `${where} has no "text" field (keys: ${shorten(Object.keys(value).join(", ") || "none")})${"messages" in value ? "; a conversation is read with the chat format" : ""}`;
    const field = (value as { text: unknown }).text;
    if (typeof field !== "string")
      return `${where}: "text" must be a string, got ${field === null ? "null" : Array.isArray(field) ? "an array" : typeof field}`;
    if (field.length === 0) return `${where} is an empty document ("text" is "")`;
    const tokens = this.encoder.encode(field);
    this.files.held.note(tokens.length);
    return tokens;
  }
}

function shorten(text: string): string {
  const flat = JSON.stringify(text.length > 60 ? `${text.slice(0, 57)}...` : text);
  return flat;
}
