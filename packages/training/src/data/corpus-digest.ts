/**
 * The identity of a text corpus by content, for checkpoints: its size and
 * SHA-256.
 */
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { listTextFiles } from "./documents.js";

const corpusDigests = new Map<string, { bytes: number; sha256: string }>();

/**
 * Size and SHA-256 of a text corpus (computed once per path and process),
 * read in chunks, never whole: of the file, or for a folder of the names and
 * contents of its .txt files in the order the loaders read them. A
 * checkpoint records it instead of the path, so a resumed run can tell
 * whether its data is the same.
 */
export function corpusDigest(dataPath: string): { bytes: number; sha256: string } {
  let digest = corpusDigests.get(dataPath);
  if (digest === undefined) {
    const hash = createHash("sha256");
    const files = fs.statSync(dataPath).isDirectory() ? listTextFiles(dataPath) : [dataPath];
    const chunk = Buffer.allocUnsafe(1 << 20);
    let bytes = 0;
    for (const file of files) {
      if (files.length > 1 || file !== dataPath) hash.update(`${path.basename(file)}\0`);
      const fd = fs.openSync(file, "r");
      try {
        for (let n = fs.readSync(fd, chunk, 0, chunk.length, null); n > 0; n = fs.readSync(fd, chunk, 0, chunk.length, null)) {
          hash.update(chunk.subarray(0, n));
          bytes += n;
        }
      } finally {
        fs.closeSync(fd);
      }
    }
    digest = { bytes, sha256: hash.digest("hex") };
    corpusDigests.set(dataPath, digest);
  }
  return digest;
}
