/**
 * Packed documents for byte-level language modelling (the loader the trainer
 * calls): a document source (JSONL, a .txt folder, or text cut at a
 * separator), a shuffle buffer, and the packer. The source is read front to
 * back and starts over at the end (epochs); the buffer holds the next
 * `shuffleBuffer` documents and each document packed is drawn from it with
 * one `random()` call, so the stream is fixed by the data RNG: every rank
 * drawing from an identical RNG packs identical batches. The position of the
 * stream (source cursor, the buffer's documents, the document being packed,
 * the id counter) is plain JSON, `state()`, which `restore()` takes back
 * after a restart, together with the data RNG's own state.
 * With a tokenizer (options.tokenizer) documents are the model's tokens,
 * encoded as they enter the buffer (tokenized-documents.ts), offsets count
 * tokens, and each label is trained only where its target token is a loss
 * target (chat: the assistant's tokens); a restore re-encodes the buffer's
 * documents.
 */
import { TrainingError } from "../errors.js";
import { checkDocuments, DEFAULT_CHECK_BYTES, type DocumentCheck } from "./document-check.js";
import { encoderOf, sourceOf, type DocumentDataOptions } from "./document-options.js";
import { readDocument, type DocumentRef, type DocumentSource, type SourceCursor, type SourceDocument, type TextFormat } from "./documents.js";
import { DEFAULT_MAX_LINE_BYTES } from "./jsonl-source.js";
import { DocumentPacker, PAD_TOKEN, type PackedBatch } from "./packer.js";
import { BYTE_VOCAB } from "./text-data.js";
import { isTokenDocument, type DocumentEncoder, type LossOn } from "./tokenized-documents.js";

export { readsDocuments, type DocumentDataOptions } from "./document-options.js";
export { DEFAULT_CHECK_BYTES, type DocumentCheck } from "./document-check.js";

/** Documents the shuffle buffer holds by default. */
export const DEFAULT_SHUFFLE_BUFFER = 64;
export const DOCUMENT_STATE_FORMAT = "ulysses-ts-documents/1";

/** The stream's position as plain JSON (record it in a checkpoint with the data RNG's state). */
export interface DocumentDataState {
  format: typeof DOCUMENT_STATE_FORMAT;
  corpus: { format: TextFormat; files: number; bytes: number };
  /** Tokenized streams only: the tokenizer's vocabulary and the loss mask; offsets below then count its tokens. */
  tokens?: { vocabSize: number; lossOn: LossOn };
  epoch: number;
  cursor: SourceCursor;
  buffer: DocumentRef[];
  pending: { ref: DocumentRef; offset: number; id: number | null; position: number } | null;
  nextId: number;
  documentsRead: number;
  skipped: number;
}

export class DocumentData {
  readonly source: DocumentSource;
  readonly shuffleBuffer: number;
  /** The data path given (a file, or the folder of a txt-dir corpus). */
  readonly path: string;
  /** Longest document held in memory (JSONL's decoded lines: maxLineBytes); null when documents are read from the file on demand. */
  readonly heldDocumentBytes: number | null;
  /** Encodes documents as the model's tokens; null: byte-level. */
  readonly encoder: DocumentEncoder | null;
  private readonly packer: DocumentPacker<SourceDocument>;
  private buffer: SourceDocument[] = [];
  private epoch = 0;
  private documentsRead = 0;
  /** Whether this pass over the corpus began at its start, and found a document since. */
  private passFromStart = true;
  private readSinceStart = false;

  constructor(options: DocumentDataOptions) {
    const shuffle = options.shuffleBuffer ?? DEFAULT_SHUFFLE_BUFFER;
    if (!Number.isSafeInteger(shuffle) || shuffle < 1) throw new TrainingError(`shuffle buffer must be a positive integer of documents, got ${shuffle}`);
    this.shuffleBuffer = shuffle;
    this.path = options.path;
    this.source = sourceOf(options);
    const jsonl = this.source.format === "jsonl" || this.source.format === "chat";
    this.heldDocumentBytes = jsonl ? (options.maxLineBytes ?? DEFAULT_MAX_LINE_BYTES) : null;
    const files = this.source.files;
    try {
      this.encoder = encoderOf(options, this.source);
    } catch (error) {
      files.close();
      throw error;
    }
    const read = (doc: SourceDocument, offset: number, count: number, into: Int32Array, at: number) => {
      if (isTokenDocument(doc)) into.set(doc.ids.subarray(offset, offset + count), at);
      else readDocument(files, doc, offset, count, into, at);
    };
    const readTrainable = (doc: SourceDocument, offset: number, count: number, into: Uint8Array, at: number) => {
      const flags = isTokenDocument(doc) ? doc.trainable : null;
      if (flags === null) into.fill(1, at, at + count);
      else into.set(flags.subarray(offset, offset + count), at);
    };
    const pad = this.encoder === null ? PAD_TOKEN : (this.encoder.tokenizer.pad ?? PAD_TOKEN);
    this.packer = new DocumentPacker(options.longDocuments ?? "split", read, pad, this.encoder === null ? null : readTrainable);
  }

  /** Token ids lie in [0, vocabSize): the tokenizer's, or 256 (bytes). */
  get vocabSize(): number {
    return this.encoder === null ? BYTE_VOCAB : this.encoder.tokenizer.vocabSize;
  }

  /**
   * Checks options and corpus before any rank starts: the format fits the
   * path, and the first `checkBytes` (default 64 MiB) of the corpus hold at
   * least one document with a loss target (two or more tokens; with a
   * tokenizer, encoded as training will), with no bad document unless
   * skipBadDocuments. Bad documents further on are met while training (same
   * message, or skipped). Throws a TrainingError naming the file and value.
   */
  static check(options: DocumentDataOptions, checkBytes = DEFAULT_CHECK_BYTES): DocumentCheck {
    return checkDocuments(options, checkBytes);
  }

  /** Bad documents skipped so far (skip mode), with the first few messages. */
  get skipped(): { count: number; examples: readonly string[] } {
    return { count: this.source.bad.count, examples: this.source.bad.examples };
  }

  /** The largest buffer the readers have held (bytes): bounded by the chunk size, the longest JSONL line and (tokenized) the longest document read to be encoded, never the corpus. */
  get largestHeldBytes(): number {
    return this.source.files.held.largest;
  }

  /** `rows` packed rows of `seq` tokens; `random` yields uniform floats in [0, 1) (one call per document taken). */
  batch(rows: number, seq: number, random: () => number): PackedBatch {
    return this.packer.pack(rows, seq, () => this.take(random));
  }

  private take(random: () => number): SourceDocument {
    while (this.buffer.length < this.shuffleBuffer) {
      const read = this.source.next();
      // a document that does not encode is bad: reported (thrown, or skipped and counted) by the encoder
      const doc = read === null || this.encoder === null ? read : this.encoder.encode(read);
      if (read !== null && doc === null) continue;
      if (doc !== null) {
        this.buffer.push(doc);
        this.documentsRead++;
        this.readSinceStart = true;
        continue;
      }
      // the end of the corpus: a whole pass without a usable document means there is none
      if (this.passFromStart && !this.readSinceStart)
        throw new TrainingError(`text data '${this.path}' holds no usable documents (${this.source.bad.count} bad ones skipped)`);
      this.epoch++;
      this.source.seek({ file: 0, offset: 0, line: 0 });
      this.passFromStart = true;
      this.readSinceStart = false;
    }
    const pick = Math.min(this.buffer.length - 1, Math.floor(random() * this.buffer.length));
    const doc = this.buffer[pick]!;
    this.buffer[pick] = this.buffer[this.buffer.length - 1]!;
    this.buffer.pop();
    return doc;
  }

  state(): DocumentDataState {
    const { files } = this.source;
    const pending = this.packer.pending;
    return {
      format: DOCUMENT_STATE_FORMAT,
      corpus: { format: this.source.format, files: files.paths.length, bytes: files.totalBytes },
      ...(this.encoder === null ? {} : { tokens: this.tokens() }),
      epoch: this.epoch,
      cursor: { ...this.source.cursor() },
      buffer: this.buffer.map((doc) => ({ ...doc.ref })),
      pending: pending === null ? null : { ref: { ...pending.doc.ref }, offset: pending.offset, id: pending.id, position: pending.position },
      nextId: this.packer.nextId,
      documentsRead: this.documentsRead,
      skipped: this.source.bad.count,
    };
  }

  /**
   * Checks a saved state (untrusted: a checkpoint's metadata) against this
   * loader before anything is loaded for it: its shape, the corpus, the cursor,
   * and every size it states, bounded by what this loader holds itself: at most
   * `shuffleBuffer` documents in the buffer, each a byte range of one corpus
   * file (JSONL: at most maxLineBytes, the longest line read), no two distinct
   * ones overlapping. So restore() holds at most what training would (each
   * distinct document once, all of them within the corpus). Throws a
   * TrainingError naming the key (data.buffer, data.pending, ...).
   */
  checkState(state: unknown): DocumentDataState {
    const s = checkState(state);
    const { files } = this.source;
    const corpus = { format: this.source.format, files: files.paths.length, bytes: files.totalBytes };
    if (s.corpus.format !== corpus.format || s.corpus.files !== corpus.files || s.corpus.bytes !== corpus.bytes) {
      throw new TrainingError(
        `data state is for a ${s.corpus.format} corpus of ${s.corpus.files} files and ${s.corpus.bytes} bytes, but '${this.path}' is ${corpus.format} with ${corpus.files} files and ${corpus.bytes} bytes`,
      );
    }
    const tokens = this.encoder === null ? undefined : this.tokens();
    if (s.tokens?.vocabSize !== tokens?.vocabSize || s.tokens?.lossOn !== tokens?.lossOn)
      throw new TrainingError(
        `data state is for ${s.tokens === undefined ? "byte-level documents" : `documents of a ${s.tokens.vocabSize}-token vocabulary with loss on ${s.tokens.lossOn}`}, but this loader reads ${tokens === undefined ? "bytes" : `a ${tokens.vocabSize}-token vocabulary with loss on ${tokens.lossOn}`}`,
      );
    const size = s.cursor.file < files.sizes.length ? files.sizes[s.cursor.file]! : 0;
    if (s.cursor.file > files.sizes.length || s.cursor.offset > size)
      throw new TrainingError(`data state: cursor ${JSON.stringify(s.cursor)} is outside the corpus (${files.paths.length} files; that one has ${size} bytes)`);
    if (s.buffer.length > this.shuffleBuffer)
      throw new TrainingError(`data state: data.buffer holds ${s.buffer.length} documents, more than the shuffle buffer's ${this.shuffleBuffer}`);
    const refs = s.buffer.map((ref, i) => ({ ref, key: `data.buffer[${i}]` }));
    if (s.pending !== null) refs.push({ ref: s.pending.ref, key: "data.pending.ref" });
    const distinct = new Map<string, { ref: DocumentRef; key: string }>();
    for (const entry of refs) {
      const { ref, key } = entry;
      const fileSize = files.sizes[ref.file];
      if (fileSize === undefined || ref.end > fileSize || ref.start >= ref.end)
        throw new TrainingError(
          `data state: ${key} ${JSON.stringify(ref)} is no byte range of the corpus (${files.paths.length} files${fileSize === undefined ? "" : `; that one has ${fileSize} bytes`})`,
        );
      if (this.heldDocumentBytes !== null && ref.end - ref.start > this.heldDocumentBytes)
        throw new TrainingError(
          `data state: ${key} is a document of ${ref.end - ref.start} bytes, more than the longest line read (${this.heldDocumentBytes} bytes)`,
        );
      distinct.set(refKey(ref), entry);
    }
    // distinct documents are distinct byte ranges (the same document may stand in the buffer more than once)
    const sorted = [...distinct.values()].sort((a, b) => a.ref.file - b.ref.file || a.ref.start - b.ref.start || a.ref.end - b.ref.end);
    // sorted by start and disjoint so far, the previous one ends last
    for (let i = 1; i < sorted.length; i++) {
      const { ref, key } = sorted[i]!;
      const before = sorted[i - 1]!;
      if (before.ref.file === ref.file && before.ref.end > ref.start)
        throw new TrainingError(
          `data state: ${key} ${JSON.stringify(ref)} overlaps ${before.key} ${JSON.stringify(before.ref)}; the documents of a corpus never share bytes`,
        );
    }
    return s;
  }

  /** Continues from `state()` of a loader over the same corpus (checked first, see checkState); throws a TrainingError naming what does not match. */
  restore(state: unknown): void {
    const s = this.checkState(state);
    // each distinct document is loaded once, however often the buffer names it
    const loaded = new Map<string, SourceDocument>();
    const load = (ref: DocumentRef): SourceDocument => {
      const key = refKey(ref);
      const known = loaded.get(key);
      if (known !== undefined) return known;
      const read = this.source.load(ref);
      const doc = this.encoder === null ? read : this.encoder.encodeOrThrow(read);
      loaded.set(key, doc);
      return doc;
    };
    const buffer = s.buffer.map(load);
    const pending = s.pending === null ? null : { ...s.pending, doc: load(s.pending.ref) };
    if (pending !== null && pending.offset >= pending.doc.length)
      throw new TrainingError(`data state: pending document offset ${pending.offset} is beyond its ${pending.doc.length} tokens`);
    this.source.seek(s.cursor);
    this.passFromStart = s.cursor.file === 0 && s.cursor.offset === 0;
    this.readSinceStart = false;
    this.buffer = buffer;
    this.packer.pending = pending;
    this.packer.nextId = s.nextId;
    this.epoch = s.epoch;
    this.documentsRead = s.documentsRead;
    this.source.bad.count = s.skipped;
  }

  private tokens(): { vocabSize: number; lossOn: LossOn } {
    return { vocabSize: this.encoder!.tokenizer.vocabSize, lossOn: this.encoder!.lossOn };
  }

  /** Releases the open file. */
  close(): void {
    this.source.files.close();
  }
}

function refKey(ref: DocumentRef): string {
  return `${ref.file}:${ref.start}:${ref.end}:${ref.line}`;
}

function checkState(state: unknown): DocumentDataState {
  const fail = (what: string): never => {
    throw new TrainingError(`data state is not a documents state (${what}): ${JSON.stringify(state)?.slice(0, 120)}`);
  };
  const count = (v: unknown) => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
  const isRef = (r: unknown): r is DocumentRef =>
    r !== null && typeof r === "object" && ["file", "start", "end", "line"].every((k) => count((r as Record<string, unknown>)[k]));
  if (state === null || typeof state !== "object") return fail("not an object");
  const s = state as Record<string, unknown>;
  if (s.format !== DOCUMENT_STATE_FORMAT) fail(`format ${JSON.stringify(s.format)}, expected '${DOCUMENT_STATE_FORMAT}'`);
  const corpus = s.corpus as Record<string, unknown> | null;
  if (corpus === null || typeof corpus !== "object" || !count(corpus.files) || !count(corpus.bytes)) fail("corpus");
  const cursor = s.cursor as Record<string, unknown> | null;
  if (cursor === null || typeof cursor !== "object" || !["file", "offset", "line"].every((k) => count(cursor[k]))) fail("cursor");
  if (!Array.isArray(s.buffer) || !s.buffer.every(isRef)) fail("buffer");
  const t = s.tokens as Record<string, unknown> | undefined;
  if (t !== undefined && (t === null || typeof t !== "object" || !count(t.vocabSize) || (t.lossOn !== "assistant" && t.lossOn !== "all"))) fail("tokens");
  const p = s.pending as Record<string, unknown> | null;
  if (p !== null && (typeof p !== "object" || !isRef(p.ref) || !count(p.offset) || !count(p.position) || !(p.id === null || count(p.id)))) fail("pending");
  for (const key of ["epoch", "nextId", "documentsRead", "skipped"]) if (!count(s[key])) fail(key);
  return state as DocumentDataState;
}
