/**
 * Streaming reads of corpus files: a ByteScanner walks one file front to
 * back in fixed chunks (fs.readSync into one reused buffer), splitting it at
 * a byte pattern (a newline, a document separator) that may straddle two
 * chunks; `readBytes` reads one byte range on demand. Nothing here ever holds
 * a whole file: the largest buffer any reader allocates is recorded in a
 * HeldBytes counter, so tests (and users) can see the bound.
 */
import fs from "node:fs";
import { TrainingError } from "../errors.js";

/** Default chunk size of the streaming readers. */
export const DEFAULT_CHUNK_BYTES = 1 << 20;

/** The largest single buffer a reader has held (bytes). */
export class HeldBytes {
  largest = 0;

  note(bytes: number): void {
    if (bytes > this.largest) this.largest = bytes;
  }
}

export interface ScanResult {
  /** File offset where the content ended: the start of the pattern, or the end of the file. */
  end: number;
  /** Whether the pattern was found (the scanner then stands just after it). */
  found: boolean;
}

export class ByteScanner {
  private readonly buffer: Buffer;
  private fd = -1;
  /** File offset of buffer[0]. */
  private base = 0;
  /** Valid bytes in the buffer. */
  private length = 0;
  /** Next unread byte of the buffer. */
  private pos = 0;
  private eof = true;

  /** `slack`: the longest pattern minus one, so a pattern split over two chunks is still found. */
  constructor(
    readonly chunkBytes: number,
    slack: number,
    held: HeldBytes,
  ) {
    if (!Number.isSafeInteger(chunkBytes) || chunkBytes < 1) throw new TrainingError(`chunk size must be a positive integer, got ${chunkBytes}`);
    this.buffer = Buffer.alloc(chunkBytes + Math.max(0, slack));
    held.note(this.buffer.length);
  }

  /** Reads `fd` from `offset` on (the previous file, if any, is forgotten, not closed). */
  open(fd: number, offset: number): void {
    this.fd = fd;
    this.base = offset;
    this.length = 0;
    this.pos = 0;
    this.eof = false;
  }

  /** File offset of the next unread byte. */
  get offset(): number {
    return this.base + this.pos;
  }

  /** True when every byte of the file has been read. */
  atEnd(): boolean {
    if (this.pos >= this.length && !this.eof) this.fill();
    return this.pos >= this.length && this.eof;
  }

  /** Keeps the unread bytes, then reads as many more as fit. */
  private fill(): void {
    this.buffer.copyWithin(0, this.pos, this.length);
    this.base += this.pos;
    this.length -= this.pos;
    this.pos = 0;
    const room = this.buffer.length - this.length;
    const n = room === 0 ? 0 : fs.readSync(this.fd, this.buffer, this.length, room, this.base + this.length);
    if (n === 0) this.eof = true;
    this.length += n;
  }

  /**
   * Reads on to the next `pattern` (null: to the end of the file), handing the
   * content before it to `visit` in pieces: views into the chunk buffer, valid
   * only during the call (copy what you keep).
   */
  scanUntil(pattern: Uint8Array | null, visit: (bytes: Uint8Array) => void): ScanResult {
    const patternLength = pattern?.length ?? 0;
    for (;;) {
      if (pattern !== null) {
        const view = this.buffer.subarray(0, this.length);
        const at = view.indexOf(pattern, this.pos);
        if (at >= 0) {
          visit(view.subarray(this.pos, at));
          this.pos = at + patternLength;
          return { end: this.base + at, found: true };
        }
      }
      if (this.eof) {
        visit(this.buffer.subarray(this.pos, this.length));
        this.pos = this.length;
        return { end: this.base + this.length, found: false };
      }
      // the last patternLength - 1 bytes may begin a pattern that the next chunk completes
      const safe = Math.max(this.pos, this.length - Math.max(0, patternLength - 1));
      visit(this.buffer.subarray(this.pos, safe));
      this.pos = safe;
      this.fill();
    }
  }
}

/**
 * Reads `count` bytes of `fd` at `position` into `into` (from index `at`),
 * through a scratch buffer of at most `chunkBytes`. `into` may be an
 * Int32Array (tokens: one per byte) or a Uint8Array. Throws, naming `file`,
 * when the file is shorter than the range (it changed since it was scanned).
 */
export function readBytes(
  fd: number,
  file: string,
  position: number,
  count: number,
  into: Int32Array | Uint8Array,
  at: number,
  chunkBytes: number,
  held: HeldBytes,
): void {
  const scratch = Buffer.allocUnsafe(Math.max(1, Math.min(count, chunkBytes)));
  held.note(scratch.length);
  let done = 0;
  while (done < count) {
    const want = Math.min(scratch.length, count - done);
    const n = fs.readSync(fd, scratch, 0, want, position + done);
    if (n === 0) throw new TrainingError(`data file '${file}' ends before byte ${position + count} (was it changed while training?)`);
    if (into instanceof Uint8Array) into.set(scratch.subarray(0, n), at + done);
    else for (let i = 0; i < n; i++) into[at + done + i] = scratch[i]!;
    done += n;
  }
}

/**
 * Whether a byte stream fed piece by piece is valid UTF-8 (a fatal
 * TextDecoder in streaming mode; a sequence split across pieces is fine).
 * Nothing is kept but the decoder's few pending bytes.
 */
export class Utf8Check {
  private readonly decoder = new TextDecoder("utf-8", { fatal: true });
  private valid = true;

  feed(bytes: Uint8Array): void {
    if (!this.valid || bytes.length === 0) return;
    try {
      this.decoder.decode(bytes, { stream: true });
    } catch {
      this.valid = false;
    }
  }

  /** Ends the stream (an unfinished sequence at the end is invalid); true when every byte was UTF-8. */
  end(): boolean {
    if (!this.valid) return false;
    try {
      this.decoder.decode();
    } catch {
      this.valid = false;
    }
    return this.valid;
  }
}
