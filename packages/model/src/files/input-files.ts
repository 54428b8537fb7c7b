/**
 * Reading the small files a user names (a settings file, a run's
 * config.json, a model to sample from): only regular files, never a FIFO, a
 * device or a socket (a FIFO blocks the open, /dev/zero never ends), and
 * never more than a stated cap, checked before the bytes are read. Large
 * inputs (text corpora, checkpoints) have readers of their own that stream.
 */
import fs from "node:fs";
import { ModelError } from "../errors.js";
import { errnoText } from "./errno.js";

/** The largest settings file (a run's config.json) read: settings are a few hundred bytes. */
export const MAX_CONFIG_FILE_BYTES = 1024 * 1024;

/** What kind of file system object `stat` is, for messages ("a FIFO", "a character device", ...). */
export function fileKind(stat: fs.Stats): string {
  if (stat.isFile()) return "a regular file";
  if (stat.isDirectory()) return "a directory";
  if (stat.isFIFO()) return "a FIFO (named pipe)";
  if (stat.isCharacterDevice()) return "a character device";
  if (stat.isBlockDevice()) return "a block device";
  if (stat.isSocket()) return "a socket";
  return "not a regular file";
}

/**
 * The bytes of `file`, which must be a regular file of at most `maxBytes`
 * bytes. `what` names it in messages ("config file", "model file"). The open
 * does not block on a FIFO (O_NONBLOCK), and the opened descriptor is checked
 * again, so a file swapped for a FIFO between the stat and the open is refused
 * too. Throws a ModelError naming `what`, the file and the limit.
 */
export function readRegularFile(file: string, maxBytes: number, what: string): Buffer {
  let fd: number;
  try {
    const before = fs.statSync(file);
    if (!before.isFile()) throw new ModelError(`${what} '${file}' is ${fileKind(before)}; only a regular file is read`);
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  } catch (cause) {
    if (cause instanceof ModelError) throw cause;
    throw new ModelError(`${what} '${file}' cannot be read: ${errnoText(cause)}`);
  }
  try {
    const stat = fs.fstatSync(fd);
    if (!stat.isFile()) throw new ModelError(`${what} '${file}' is ${fileKind(stat)}; only a regular file is read`);
    if (stat.size > maxBytes) throw new ModelError(`${what} '${file}' holds ${stat.size} bytes, more than the ${maxBytes} bytes read for it`);
    const bytes = Buffer.alloc(stat.size);
    let filled = 0;
    while (filled < bytes.length) {
      const n = fs.readSync(fd, bytes, filled, bytes.length - filled, filled);
      if (n === 0) break;
      filled += n;
    }
    return bytes.subarray(0, filled);
  } catch (cause) {
    if (cause instanceof ModelError) throw cause;
    throw new ModelError(`${what} '${file}' cannot be read: ${errnoText(cause)}`);
  } finally {
    fs.closeSync(fd);
  }
}

/** Why `file` cannot be used as an input file, or null when it can (a regular file that exists). */
export function fileProblem(file: string): string | null {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(file);
  } catch (cause) {
    return errnoText(cause);
  }
  return stat.isFile() ? null : stat.isDirectory() ? "is a directory, not a file" : "is not a regular file";
}

/** The JSON object in `file` (read as readRegularFile reads it); `what` names it in messages ("tokenizer", "weight index"). */
export function readJsonObject(file: string, maxBytes: number, what: string): Record<string, unknown> {
  const bytes = readRegularFile(file, maxBytes, what);
  let json: unknown;
  try {
    json = JSON.parse(bytes.toString("utf8"));
  } catch (cause) {
    throw new ModelError(`${what} '${file}' is not valid JSON: ${(cause as Error).message}`, { cause });
  }
  if (json === null || typeof json !== "object" || Array.isArray(json)) throw new ModelError(`${what} '${file}' must hold a JSON object`);
  return json as Record<string, unknown>;
}
