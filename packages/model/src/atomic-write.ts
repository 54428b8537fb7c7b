/**
 * Atomic file writes: the bytes go to a temporary file in the same directory,
 * which is flushed and then renamed over the target, so a reader (or a run
 * interrupted by Ctrl-C or a crash) sees either the old file or the complete
 * new one, never a partial file. Directory creation is the caller's job.
 */
import fs from "node:fs";
import path from "node:path";
import { ModelError } from "./errors.js";

let counter = 0;

/** Bytes per write call: fs.writeSync refuses a length past 2^31 - 1, and a model's weights pass 2 GiB from about 540M fp32 parameters. */
export const WRITE_CHUNK_BYTES = 1 << 30;

/** A temporary file beside `target`: written part by part, then flushed and renamed over the target, or removed. */
class AtomicFile {
  private readonly temp: string;
  private fd: number | undefined;

  constructor(
    private readonly target: string,
    private readonly writeChunkBytes: number,
  ) {
    this.temp = path.join(path.dirname(target), `.${path.basename(target)}.tmp-${process.pid}-${Date.now()}-${counter++}`);
    this.fd = fs.openSync(this.temp, "w");
  }

  write(part: Uint8Array): void {
    let written = 0;
    while (written < part.byteLength) written += fs.writeSync(this.fd!, part, written, Math.min(part.byteLength - written, this.writeChunkBytes));
  }

  commit(): void {
    fs.fsyncSync(this.fd!);
    fs.closeSync(this.fd!);
    this.fd = undefined;
    fs.renameSync(this.temp, this.target);
  }

  /** Removes the temporary file; the error to throw: a ModelError as it is, anything else named with the target. */
  abort(cause: unknown): ModelError {
    if (this.fd !== undefined) fs.closeSync(this.fd);
    fs.rmSync(this.temp, { force: true });
    if (cause instanceof ModelError) return cause;
    return new ModelError(`could not write '${this.target}' atomically: ${(cause as Error).message}`, { cause });
  }
}

/** Opens the temporary file of `target`, naming the target when it cannot. */
function open(target: string, writeChunkBytes: number): AtomicFile {
  try {
    return new AtomicFile(target, writeChunkBytes);
  } catch (cause) {
    throw new ModelError(`could not write '${target}' atomically: ${(cause as Error).message}`, { cause });
  }
}

/**
 * Writes `chunks` (concatenated) to `target` atomically. An iterable is
 * drawn one chunk at a time (a generator may build each only when its turn
 * comes, so a large file is never whole in memory); a ModelError it throws
 * reaches the caller as it is, after the temporary file is removed.
 */
export function writeFileAtomic(target: string, chunks: Uint8Array | Iterable<Uint8Array>, writeChunkBytes = WRITE_CHUNK_BYTES): void {
  const file = open(target, writeChunkBytes);
  try {
    for (const part of chunks instanceof Uint8Array ? [chunks] : chunks) file.write(part);
    file.commit();
  } catch (cause) {
    throw file.abort(cause);
  }
}

/**
 * writeFileAtomic from an asynchronous source: each chunk is written before
 * the next is asked for, so a source may hand the same buffer again (a
 * collective's receive buffer, refilled per chunk).
 */
export async function writeFileAtomicAsync(
  target: string,
  chunks: AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
  writeChunkBytes = WRITE_CHUNK_BYTES,
): Promise<void> {
  const file = open(target, writeChunkBytes);
  try {
    for await (const part of chunks) file.write(part);
    file.commit();
  } catch (cause) {
    throw file.abort(cause);
  }
}
