/**
 * Plain-text documents: one file cut at a separator string (for example
 * "\n\n"), each piece a document whose tokens are its bytes. The file is
 * scanned in chunks (a separator may straddle two) and each document checked
 * to be UTF-8 with a fatal TextDecoder fed piece by piece, so no document is
 * held: its tokens are read from the file when packed. A separator at the very
 * end of the file ends the last document; an empty document elsewhere (two
 * separators in a row, one at the start) or one that is not UTF-8 is bad,
 * named by file, document number and byte range.
 */
import { TrainingError } from "../errors.js";
import { ByteScanner, Utf8Check } from "./byte-scanner.js";
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

export class SeparatedTextSource implements DocumentSource {
  readonly format = "text" as const;
  readonly files: CorpusFiles;
  readonly bad: BadDocuments;
  private readonly separator: Uint8Array;
  private readonly scanner: ByteScanner;
  /** Documents (good or bad) read so far. */
  private documents = 0;

  constructor(dataPath: string, separator: string, options: SourceOptions = {}) {
    if (typeof separator !== "string" || separator.length === 0)
      throw new TrainingError(`a document separator must be a non-empty string, got ${JSON.stringify(separator)}`);
    this.separator = new TextEncoder().encode(separator);
    this.files = corpusFiles(dataPath, "text", options);
    this.bad = new BadDocuments(options.skipBadDocuments ?? false);
    this.scanner = new ByteScanner(this.files.chunkBytes, this.separator.length - 1, this.files.held);
    this.seek({ file: 0, offset: 0, line: 0 });
  }

  private get name(): string {
    return this.files.paths[0]!;
  }

  cursor(): SourceCursor {
    return { file: 0, offset: this.scanner.offset, line: this.documents };
  }

  seek(cursor: SourceCursor): void {
    this.scanner.open(this.files.fd(0), cursor.offset);
    this.documents = cursor.line;
  }

  next(): SourceDocument | null {
    for (;;) {
      if (this.scanner.atEnd()) return null;
      const start = this.scanner.offset;
      const line = ++this.documents;
      const check = new Utf8Check();
      let length = 0;
      const { end, found } = this.scanner.scanUntil(this.separator, (bytes) => {
        length += bytes.length;
        check.feed(bytes);
      });
      const utf8 = check.end();
      if (length === 0 && !found) return null; // nothing after the last separator
      const where = `text file '${this.name}' document ${line} (bytes ${start}..${end})`;
      if (length === 0) {
        this.bad.report(`${where} is an empty document (two separators in a row, or one at the start)`);
        continue;
      }
      if (!utf8) {
        this.bad.report(`${where} is not valid UTF-8`);
        continue;
      }
      return { ref: { file: 0, start, end, line }, length, bytes: null };
    }
  }

  load(ref: DocumentRef): SourceDocument {
    const { start, end } = ref;
    if (ref.file !== 0 || !(start >= 0 && end > start && end <= this.files.totalBytes))
      throw new TrainingError(
        `text file '${this.name}' has no document at bytes ${start}..${end} (file ${ref.file}; the file has ${this.files.totalBytes} bytes)`,
      );
    return { ref: { ...ref }, length: end - start, bytes: null };
  }
}
