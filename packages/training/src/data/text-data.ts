/**
 * Byte-level language modelling on any file: vocabulary 256 (one token per
 * byte), random windows of seq + 1 bytes shifted into tokens and labels.
 * Unusable files (missing, empty, shorter than one window) fail with the path
 * and the sizes.
 */
import fs from "node:fs";
import { TrainingError } from "../errors.js";
import type { Batch } from "@ulysses/parallel";
import { shiftWindows } from "./batch.js";

export const BYTE_VOCAB = 256;

export class ByteTextData {
  readonly path: string;
  readonly bytes: Uint8Array;

  constructor(path: string, seq: number) {
    this.path = path;
    ByteTextData.check(path, seq);
    this.bytes = fs.readFileSync(path);
  }

  /** Checks that `path` can hold one sequence of `seq` tokens; returns its size in bytes. */
  static check(path: string, seq: number): number {
    let stat: fs.Stats;
    try {
      stat = fs.statSync(path);
    } catch (cause) {
      throw new TrainingError(`text data file '${path}' cannot be read: ${(cause as NodeJS.ErrnoException).code ?? (cause as Error).message}`, { cause });
    }
    if (!stat.isFile()) throw new TrainingError(`text data path '${path}' is not a regular file`);
    if (stat.size === 0) throw new TrainingError(`text data file '${path}' is empty (0 bytes)`);
    if (stat.size < seq + 1) {
      throw new TrainingError(`text data file '${path}' has ${stat.size} bytes, too short for one sequence of ${seq} tokens (needs at least ${seq + 1})`);
    }
    return stat.size;
  }

  /** `batch` random windows; `random` yields uniform floats in [0, 1). */
  batch(batch: number, seq: number, random: () => number): Batch {
    const windows = new Int32Array(batch * (seq + 1));
    const starts = this.bytes.length - seq;
    for (let b = 0; b < batch; b++) {
      const start = Math.min(starts - 1, Math.floor(random() * starts));
      for (let i = 0; i <= seq; i++) windows[b * (seq + 1) + i] = this.bytes[start + i]!;
    }
    return shiftWindows(windows, batch, seq);
  }
}
