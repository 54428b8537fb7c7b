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

/**
 * Writes `chunks` (concatenated) to `target` atomically. An iterable is
 * drawn one chunk at a time (a generator may build each only when its turn
 * comes, so a large file is never whole in memory); a ModelError it throws
 * reaches the caller as it is, after the temporary file is removed.
 */
export function writeFileAtomic(target: string, chunks: Uint8Array | Iterable<Uint8Array>, writeChunkBytes = WRITE_CHUNK_BYTES): void {
  const parts = chunks instanceof Uint8Array ? [chunks] : chunks;
  const dir = path.dirname(target);
  const temp = path.join(dir, `.${path.basename(target)}.tmp-${process.pid}-${Date.now()}-${counter++}`);
  let fd: number | undefined;
  try {
    fd = fs.openSync(temp, "w");
    for (const part of parts) {
      let written = 0;
      while (written < part.byteLength) written += fs.writeSync(fd, part, written, Math.min(part.byteLength - written, writeChunkBytes));
    }
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    fd = undefined;
    fs.renameSync(temp, target);
  } catch (cause) {
    if (fd !== undefined) fs.closeSync(fd);
    fs.rmSync(temp, { force: true });
    if (cause instanceof ModelError) throw cause;
    throw new ModelError(`could not write '${target}' atomically: ${(cause as Error).message}`, { cause });
  }
}
