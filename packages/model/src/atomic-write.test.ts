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
import { writeFileAtomic, writeFileAtomicAsync } from "./atomic-write.js";
import { ModelError } from "./errors.js";
import { readSafetensors } from "./safetensors.js";
import { writeSafetensorsStreamedAsync } from "./safetensors-stream.js";

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

describe("writeFileAtomicAsync and writeSafetensorsStreamedAsync", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ulysses-atomic-async-"));

  it("writes each part before asking for the next, so a source may refill one buffer", async () => {
    const file = path.join(dir, "a.bin");
    const buffer = new Uint8Array(4);
    await writeFileAtomicAsync(
      file,
      (async function* () {
        for (let k = 0; k < 3; k++) {
          buffer.fill(k + 1);
          yield buffer;
        }
      })(),
    );
    expect([...fs.readFileSync(file)]).toEqual([1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]);
  });

  it("a tensor streamed in parts reads back as written; parts past or short of the header's size are refused and leave no file", async () => {
    const file = path.join(dir, "t.safetensors");
    const values = Float32Array.from({ length: 10 }, (_, i) => i / 3);
    const parts = (from: number[]) =>
      (async function* () {
        for (let k = 0; k + 1 < from.length; k++) yield new Uint8Array(values.buffer, 4 * from[k]!, 4 * (from[k + 1]! - from[k]!));
      })();
    await writeSafetensorsStreamedAsync(file, [{ name: "x", dtype: "float32", shape: [10] }], () => parts([0, 4, 10]), { step: "1" });
    const read = readSafetensors(file);
    expect([...(read.tensors.get("x")!.data as Float32Array)]).toEqual([...values]);
    expect(read.metadata).toEqual({ step: "1" });
    const short = path.join(dir, "short.safetensors");
    await expect(writeSafetensorsStreamedAsync(short, [{ name: "x", dtype: "float32", shape: [10] }], () => parts([0, 4, 9]))).rejects.toThrow(
      `'${short}': tensor 'x' gave 36 bytes, its header says 40`,
    );
    await expect(writeSafetensorsStreamedAsync(short, [{ name: "x", dtype: "float32", shape: [8] }], () => parts([0, 4, 9]))).rejects.toThrow(
      `'${short}': tensor 'x' gave 36 bytes, its header says 32`,
    );
    expect(fs.existsSync(short)).toBe(false);
    expect(fs.readdirSync(dir).filter((f) => f.includes(".tmp-"))).toEqual([]);
  });
});
