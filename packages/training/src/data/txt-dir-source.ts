/**
 * A folder of .txt files, one document each, in name order (see
 * listTextFiles). Each file is checked in chunks to be UTF-8 (a fatal
 * TextDecoder fed piece by piece) and never held: its tokens are read when
 * packed. An empty file or one that is not UTF-8 is a bad document, named by
 * its path.
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

export class TxtDirSource implements DocumentSource {
  readonly format = "txt-dir" as const;
  readonly files: CorpusFiles;
  readonly bad: BadDocuments;
  private readonly scanner: ByteScanner;
  /** Index of the next file. */
  private file = 0;

  constructor(dir: string, options: SourceOptions = {}) {
    this.files = corpusFiles(dir, "txt-dir", options);
    this.bad = new BadDocuments(options.skipBadDocuments ?? false);
    this.scanner = new ByteScanner(this.files.chunkBytes, 0, this.files.held);
  }

  cursor(): SourceCursor {
    return { file: this.file, offset: 0, line: 0 };
  }

  seek(cursor: SourceCursor): void {
    this.file = cursor.file;
  }

  next(): SourceDocument | null {
    for (; this.file < this.files.paths.length; ) {
      const file = this.file++;
      const name = this.files.paths[file]!;
      this.scanner.open(this.files.fd(file), 0);
      const check = new Utf8Check();
      const { end } = this.scanner.scanUntil(null, (bytes) => check.feed(bytes));
      const utf8 = check.end();
      if (end === 0) {
        this.bad.report(`text file '${name}' is an empty document (0 bytes)`);
        continue;
      }
      if (!utf8) {
        this.bad.report(`text file '${name}' is not valid UTF-8`);
        continue;
      }
      return { ref: { file, start: 0, end, line: 0 }, length: end, bytes: null };
    }
    return null;
  }

  load(ref: DocumentRef): SourceDocument {
    const size = this.files.sizes[ref.file];
    if (size === undefined || ref.start !== 0 || !(ref.end > 0 && ref.end <= size))
      throw new TrainingError(
        `text folder document ${JSON.stringify(ref)} does not fit the corpus (${this.files.paths.length} files${size === undefined ? "" : `; file '${this.files.paths[ref.file]}' has ${size} bytes`})`,
      );
    return { ref: { ...ref }, length: ref.end, bytes: null };
  }
}
