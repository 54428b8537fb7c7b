/**
 * Document sources: a corpus read front to back as a stream of documents,
 * byte-level (a document's tokens are its UTF-8 bytes, vocabulary 256) unless
 * a tokenizer encodes them (tokenized-documents.ts). Four formats: JSONL (one
 * {"text": "..."} object per line), a folder of .txt files (sorted by name,
 * one document each), plain text cut at a separator string, and chat (JSONL
 * of {"messages": [{"role", "content"}, ...]}, tokenized data only; never
 * picked by auto: a .jsonl file is read as text JSONL unless the format is
 * chat). A source hands out DocumentRefs, plain JSON that says where a
 * document lies (so a checkpoint can record the stream's position, and a
 * document can be read again after a restart); the tokens of a document are
 * read from its file on demand, except JSONL's, whose decoded text is held.
 * Bad documents throw a TrainingError naming the file (and the line, for
 * JSONL), or are skipped and counted when the caller asks for that.
 */
import fs from "node:fs";
import path from "node:path";
import type { ChatMessage } from "@ulysses/model";
import { TrainingError } from "../errors.js";
import { DEFAULT_CHUNK_BYTES, HeldBytes, readBytes } from "./byte-scanner.js";

/** The corpus formats of a text task. */
export type TextFormat = "text" | "jsonl" | "txt-dir" | "chat";
export type TextFormatOption = TextFormat | "auto";
/** The byte-level formats (what a run without the model's tokenizer reads). */
export const TEXT_FORMATS: readonly TextFormatOption[] = ["auto", "text", "jsonl", "txt-dir"];
/** Every format: the text formats and chat (which needs a tokenizer). */
export const DATA_FORMATS: readonly TextFormatOption[] = [...TEXT_FORMATS, "chat"];

/** Where one document lies: file index, byte range of its content in that file, and its line (JSONL) or document number (separator). */
export interface DocumentRef {
  file: number;
  start: number;
  end: number;
  line: number;
}

/** A source's reading position: the next document starts at `offset` of file `file`; `line` lines or documents of that file came before. */
export interface SourceCursor {
  file: number;
  offset: number;
  line: number;
}

export interface SourceDocument {
  readonly ref: DocumentRef;
  /** Tokens (UTF-8 bytes), at least 1. */
  readonly length: number;
  /** The tokens when held in memory (JSONL), else null: read from the file on demand. */
  readonly bytes: Uint8Array | null;
  /** A chat line's conversation (format chat; `length` is then the line's bytes). */
  readonly messages?: readonly ChatMessage[];
}

export interface DocumentSource {
  readonly format: TextFormat;
  readonly files: CorpusFiles;
  readonly bad: BadDocuments;
  /** The next good document, or null at the end of the corpus. */
  next(): SourceDocument | null;
  cursor(): SourceCursor;
  seek(cursor: SourceCursor): void;
  /** The document at `ref` again (after a restart); throws when it is no longer there. */
  load(ref: DocumentRef): SourceDocument;
}

export interface SourceOptions {
  /** Bytes per read of the streaming readers (default 1 MiB; tests use tiny ones). */
  chunkBytes?: number;
  /** Skip bad documents and count them instead of throwing. */
  skipBadDocuments?: boolean;
}

/** The corpus's files (one, or the .txt files of a folder), opened lazily one at a time. */
export class CorpusFiles {
  readonly sizes: number[];
  readonly totalBytes: number;
  readonly held = new HeldBytes();
  private openIndex = -1;
  private openFd = -1;

  constructor(
    readonly paths: readonly string[],
    readonly chunkBytes: number,
  ) {
    this.sizes = paths.map((file) => statFile(file).size);
    this.totalBytes = this.sizes.reduce((a, b) => a + b, 0);
  }

  fd(file: number): number {
    if (file !== this.openIndex) {
      this.close();
      const name = this.paths[file];
      if (name === undefined) throw new TrainingError(`data file index ${file} is outside the ${this.paths.length} files of the corpus`);
      try {
        this.openFd = fs.openSync(name, "r");
      } catch (cause) {
        throw new TrainingError(`data file '${name}' cannot be opened: ${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message}`, { cause });
      }
      this.openIndex = file;
    }
    return this.openFd;
  }

  /** Reads `count` bytes of file `file` at `position` into `into` from index `at`. */
  read(file: number, position: number, count: number, into: Int32Array | Uint8Array, at: number): void {
    readBytes(this.fd(file), this.paths[file]!, position, count, into, at, this.chunkBytes, this.held);
  }

  close(): void {
    if (this.openFd >= 0) fs.closeSync(this.openFd);
    this.openFd = -1;
    this.openIndex = -1;
  }
}

/** Bad documents: thrown, or (skip mode) counted with the first few messages kept. */
export class BadDocuments {
  count = 0;
  readonly examples: string[] = [];

  constructor(readonly skip: boolean) {}

  report(message: string): void {
    if (!this.skip) throw new TrainingError(`${message} (pass --skip-bad-documents to skip such documents)`);
    this.count++;
    if (this.examples.length < 3) this.examples.push(message);
  }
}

function statFile(file: string): fs.Stats {
  try {
    return fs.statSync(file);
  } catch (cause) {
    throw new TrainingError(`text data file '${file}' cannot be read: ${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message}`, { cause });
  }
}

/** The format `option` means for `dataPath`: auto is txt-dir for a folder, jsonl for a *.jsonl file, else text. */
export function resolveTextFormat(dataPath: string, option: TextFormatOption): TextFormat {
  if (!DATA_FORMATS.includes(option)) throw new TrainingError(`unknown text data format '${option}' (use ${DATA_FORMATS.join(", ")})`);
  if (option !== "auto") return option;
  const stat = statFile(dataPath);
  if (stat.isDirectory()) return "txt-dir";
  return dataPath.toLowerCase().endsWith(".jsonl") ? "jsonl" : "text";
}

/** The .txt files of a folder, sorted by name (code units, the same on every machine); subfolders and other files are ignored. */
export function listTextFiles(dir: string): string[] {
  let names: fs.Dirent[];
  try {
    names = fs.readdirSync(dir, { withFileTypes: true });
  } catch (cause) {
    throw new TrainingError(`text data folder '${dir}' cannot be listed: ${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message}`, { cause });
  }
  const linkedFile = (name: string) => {
    try {
      return fs.statSync(path.join(dir, name)).isFile();
    } catch {
      return false; // a dangling link is no document
    }
  };
  const files = names
    .filter((entry) => entry.name.endsWith(".txt") && (entry.isFile() || (entry.isSymbolicLink() && linkedFile(entry.name))))
    .map((entry) => entry.name)
    .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  if (files.length === 0) throw new TrainingError(`text data folder '${dir}' holds no .txt files`);
  return files.map((name) => path.join(dir, name));
}

/** The files of a corpus in `format`, checked to be of the right kind. */
export function corpusFiles(dataPath: string, format: TextFormat, options: SourceOptions = {}): CorpusFiles {
  const stat = statFile(dataPath);
  const chunkBytes = options.chunkBytes ?? DEFAULT_CHUNK_BYTES;
  if (format === "txt-dir") {
    if (!stat.isDirectory()) throw new TrainingError(`text data format txt-dir needs a folder of .txt files, but '${dataPath}' is not a folder`);
    return new CorpusFiles(listTextFiles(dataPath), chunkBytes);
  }
  if (!stat.isFile())
    throw new TrainingError(`text data format ${format} needs a regular file, but '${dataPath}' is ${stat.isDirectory() ? "a folder" : "not a regular file"}`);
  if (stat.size === 0) throw new TrainingError(`text data file '${dataPath}' is empty (0 bytes)`);
  return new CorpusFiles([dataPath], chunkBytes);
}

/** Reads `count` tokens of `doc` from its token `offset` into `into` at index `at`. */
export function readDocument(files: CorpusFiles, doc: SourceDocument, offset: number, count: number, into: Int32Array, at: number): void {
  if (offset < 0 || count < 0 || offset + count > doc.length)
    throw new TrainingError(`reading tokens ${offset}..${offset + count} of a document of ${doc.length} tokens`);
  if (doc.bytes !== null) {
    for (let i = 0; i < count; i++) into[at + i] = doc.bytes[offset + i]!;
    return;
  }
  files.read(doc.ref.file, doc.ref.start + offset, count, into, at);
}
