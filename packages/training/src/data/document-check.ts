/**
 * DocumentData.check: the options and the first bytes of a corpus, read as
 * the ranks will read them, before any rank starts. With a tokenizer every
 * document read is encoded too, so a template that cannot render the
 * conversations, or data with nothing to train, is refused up front.
 */
import { TrainingError } from "../errors.js";
import { DATA_FORMATS, type DocumentSource, type TextFormat } from "./documents.js";
import { encoderOf, sourceOf, type DocumentDataOptions } from "./document-options.js";
import { LONG_DOCUMENTS } from "./packer.js";
import { documentTargets } from "./tokenized-documents.js";

/** Bytes of a corpus DocumentData.check reads by default. */
export const DEFAULT_CHECK_BYTES = 64 << 20;

/** What DocumentData.check found. */
export interface DocumentCheck {
  format: TextFormat;
  files: number;
  bytes: number;
  /** Good documents in the bytes read. */
  documents: number;
  /** Bad documents skipped in the bytes read (skip mode). */
  skipped: number;
  /** Bytes read (the first `checkBytes` of the corpus, or all of it). */
  bytesChecked: number;
  /** Whether the whole corpus was read. */
  complete: boolean;
  /** Tokens of the good documents (bytes, without a tokenizer). */
  tokens: number;
  /** Of those, the loss targets: every token but a document's first, or (loss on assistant) the assistant tokens. */
  targets: number;
}

export function checkDocuments(options: DocumentDataOptions, checkBytes = DEFAULT_CHECK_BYTES): DocumentCheck {
  if (options.format !== undefined && !DATA_FORMATS.includes(options.format))
    throw new TrainingError(`unknown text data format '${options.format}' (use ${DATA_FORMATS.join(", ")})`);
  if (options.longDocuments !== undefined && !LONG_DOCUMENTS.includes(options.longDocuments))
    throw new TrainingError(`long documents must be ${LONG_DOCUMENTS.join(" or ")}, got '${options.longDocuments}'`);
  const source = sourceOf(options);
  try {
    const encoder = encoderOf(options, source);
    const { files } = source;
    let documents = 0;
    let tokens = 0;
    let targets = 0;
    let checked = 0;
    for (;;) {
      const doc = source.next();
      checked = bytesBefore(source);
      if (doc === null) break;
      const encoded = encoder === null ? null : encoder.encode(doc);
      if (encoder === null || encoded !== null) {
        documents++;
        tokens += encoded?.length ?? doc.length;
        targets += encoded === null ? doc.length - 1 : documentTargets(encoded);
      }
      if (checked >= checkBytes) break;
    }
    const complete = checked >= files.totalBytes;
    const where = `${source.format === "txt-dir" ? "text folder" : `${source.format} file`} '${options.path}'`;
    const range = complete ? "" : ` in its first ${checked} bytes`;
    const skipped = source.bad.count > 0 ? ` (${source.bad.count} bad documents skipped; the first: ${source.bad.examples[0]})` : "";
    if (documents === 0) throw new TrainingError(`${where} holds no documents${range}${skipped}`);
    if (targets === 0) throw new TrainingError(`${where} holds no document of 2 or more tokens${range}: there is nothing to predict${skipped}`);
    return {
      format: source.format,
      files: files.paths.length,
      bytes: files.totalBytes,
      documents,
      skipped: source.bad.count,
      bytesChecked: checked,
      complete,
      tokens,
      targets,
    };
  } finally {
    source.files.close();
  }
}

/** Bytes of the corpus before the source's cursor. */
export function bytesBefore(source: DocumentSource): number {
  const { file, offset } = source.cursor();
  let before = 0;
  for (let i = 0; i < file && i < source.files.sizes.length; i++) before += source.files.sizes[i]!;
  return before + offset;
}
