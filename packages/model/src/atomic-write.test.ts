/**
 * writeFileAtomic: the bytes land whole, however they are cut into write
 * calls (a weights tensor past 2 GiB needs several: fs.writeSync refuses a
 * longer length), from an array or drawn from a generator; a generator's
 * ModelError reaches the caller and leaves no file behind.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { writeFileAtomic } from "./atomic-write.js";
import { ModelError } from "./errors.js";

describe("writeFileAtomic", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ulysses-atomic-"));
  const bytes = Uint8Array.from({ length: 1000 }, (_, i) => (i * 37) % 251);

  it("writes every byte in write calls of at most the chunk size, from an array or a generator", () => {
    const file = path.join(dir, "a.bin");
    writeFileAtomic(file, bytes, 7);
    expect(new Uint8Array(fs.readFileSync(file))).toEqual(bytes);
    writeFileAtomic(
      file,
      (function* () {
        yield bytes.subarray(0, 333);
        yield bytes.subarray(333);
      })(),
      64,
    );
    expect(new Uint8Array(fs.readFileSync(file))).toEqual(bytes);
  });

  it("a generator's ModelError reaches the caller unchanged, and the old file stays", () => {
    const file = path.join(dir, "b.bin");
    writeFileAtomic(file, bytes);
    const failing = (function* () {
      yield bytes;
      throw new ModelError("tensor 'x' gave 3 bytes");
    })();
    expect(() => writeFileAtomic(file, failing)).toThrow(/^tensor 'x' gave 3 bytes$/);
    expect(new Uint8Array(fs.readFileSync(file))).toEqual(bytes);
    expect(fs.readdirSync(dir).filter((f) => f.includes(".tmp-"))).toEqual([]);
  });
});
