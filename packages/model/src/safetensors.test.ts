import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { Tensor } from "@ulysses/tensors";
import { decodeSafetensors, encodeSafetensors, readSafetensorRanges, readSafetensors, readSafetensorsHeader, writeSafetensors } from "./safetensors.js";

function concatBytes(chunks: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.byteLength, 0));
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}

/** Builds a file by hand, byte by byte, as the format description says. */
function handBuilt(headerJson: string, data: number[]): Uint8Array {
  const header = new TextEncoder().encode(headerJson);
  const out = new Uint8Array(8 + header.length + data.length);
  let n = header.length;
  for (let i = 0; i < 8; i++) {
    out[i] = n & 0xff;
    n = Math.floor(n / 256);
  }
  out.set(header, 8);
  out.set(data, 8 + header.length);
  return out;
}

describe("safetensors", () => {
  it("reads a hand-built file", () => {
    // f32 [2] = 1.0, -2.0 (little-endian IEEE 754); i32 [1] = 258
    const bytes = handBuilt(
      '{"__metadata__":{"step":"7"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I32","shape":[1,1],"data_offsets":[8,12]}}',
      [0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0, 0x02, 0x01, 0x00, 0x00],
    );
    const { tensors, metadata } = decodeSafetensors(bytes);
    expect(metadata).toEqual({ step: "7" });
    expect([...tensors.get("a")!.data]).toEqual([1, -2]);
    expect(tensors.get("b")!.shape).toEqual([1, 1]);
    expect([...tensors.get("b")!.data]).toEqual([258]);
  });

  it("writes the exact bytes of the format", () => {
    const bytes = concatBytes(encodeSafetensors({ x: Tensor.from("float32", [1], [1]) }, { k: "v" }));
    const length = bytes[0]! + bytes[1]! * 256;
    expect(length % 8).toBe(0);
    expect([...bytes.subarray(2, 8)]).toEqual([0, 0, 0, 0, 0, 0]);
    const json = new TextDecoder().decode(bytes.subarray(8, 8 + length));
    expect(JSON.parse(json)).toEqual({ __metadata__: { k: "v" }, x: { dtype: "F32", shape: [1], data_offsets: [0, 4] } });
    expect(json.slice(json.trimEnd().length)).toMatch(/^ *$/);
    expect([...bytes.subarray(8 + length)]).toEqual([0x00, 0x00, 0x80, 0x3f]);
  });

  it("round-trips every dtype through a file", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-"));
    const file = path.join(dir, "t.safetensors");
    const tensors = {
      f32: Tensor.from("float32", [2, 3], [1, 2, 3, 4, 5, 6.5]),
      f64: Tensor.from("float64", [1], [Math.PI]),
      i64: Tensor.from("int64", [2], [1n, -5n]),
      u8: Tensor.from("uint8", [3], [1, 2, 255]),
      bf16: new Tensor("bfloat16", [2], new Uint16Array([0x3f80, 0xc000])),
      empty: new Tensor("float32", [0, 4]),
    };
    writeSafetensors(file, tensors, { note: "hi" });
    const back = readSafetensors(file);
    expect(back.metadata).toEqual({ note: "hi" });
    for (const [name, t] of Object.entries(tensors)) {
      const r = back.tensors.get(name)!;
      expect(r.dtype).toBe(t.dtype);
      expect(r.shape).toEqual(t.shape);
      expect([...r.data]).toEqual([...t.data]);
    }
    expect(fs.readdirSync(dir)).toEqual(["t.safetensors"]);
  });

  it("rejects corrupt files with the offending values", () => {
    expect(() => decodeSafetensors(new Uint8Array(3), "x.st")).toThrow(/x.st.*3 bytes/);
    const bad = handBuilt('{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', [0, 0, 0, 0, 0, 0, 0, 0]);
    expect(() => decodeSafetensors(bad, "bad.st")).toThrow(/'a'.*needs 12 bytes.*\[0, 8\)/);
    const unknown = handBuilt('{"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}', [0]);
    expect(() => decodeSafetensors(unknown)).toThrow(/unsupported dtype "Q4"/);
    expect(() => readSafetensors("/nonexistent/x.safetensors")).toThrow(/\/nonexistent\/x.safetensors/);
  });
});

/** A hand-built header (no writer involved): 8-byte little-endian length, JSON, then `dataBytes` zero bytes. */
function craftedFile(dir: string, name: string, header: unknown, dataBytes: number, options: { headerLength?: bigint } = {}): string {
  const json = new TextEncoder().encode(JSON.stringify(header));
  const out = new Uint8Array(8 + json.length + dataBytes);
  new DataView(out.buffer).setBigUint64(0, options.headerLength ?? BigInt(json.length), true);
  out.set(json, 8);
  const file = path.join(dir, name);
  fs.writeFileSync(file, out);
  return file;
}

/** Runs `body`, expecting a ModelError naming `file` and matching `pattern`, in under 1 s and 100 MB of RSS growth. */
function expectRefusedCheaply(body: () => unknown, file: string, pattern: RegExp): string {
  const rss = process.memoryUsage().rss;
  const started = performance.now();
  let message = "";
  try {
    body();
  } catch (error) {
    expect((error as Error).name).toBe("ModelError");
    message = (error as Error).message;
  }
  const ms = performance.now() - started;
  const grown = process.memoryUsage().rss - rss;
  expect(message, "no error was thrown").not.toBe("");
  expect(message).toContain(file);
  expect(message).toMatch(pattern);
  expect(ms).toBeLessThan(1000);
  expect(grown).toBeLessThan(100 * 2 ** 20);
  return message;
}

describe("readSafetensorRanges", () => {
  it("reads a range of a tensor straight into caller memory and refuses one past its end, naming the tensor and the file", () => {
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "ranges-")), "r.safetensors");
    const x = Float32Array.from({ length: 10 }, (_, i) => i * 1.5);
    writeSafetensors(file, { x: new Tensor("float32", [10], x), y: new Tensor("float32", [2], new Float32Array([7, 8])) });
    const into = new Float32Array(4);
    readSafetensorRanges(file, (e) => (e.name === "x" ? { target: new Uint8Array(into.buffer), offset: 4 * 3 } : null));
    expect([...into]).toEqual([4.5, 6, 7.5, 9]);
    expect(() => readSafetensorRanges(file, (e) => (e.name === "x" ? { target: new Uint8Array(16), offset: 4 * 7 } : null))).toThrow(
      `'${file}': bytes [28, 44) of tensor 'x' lie past its 40 bytes`,
    );
  });
});

describe("safetensors from untrusted files", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "st-crafted-"));
  const f32 = (shape: number[], begin: number, end: number) => ({ dtype: "F32", shape, data_offsets: [begin, end] });

  it("refuses many entries aliasing one byte range (the 8.5 MB file that needed 16 GB)", () => {
    const header: Record<string, unknown> = {};
    // 4 MiB of data, 4000 tensors each claiming all of it: a copying reader would allocate 16 GB
    for (let i = 0; i < 4000; i++) header[`t${i}`] = f32([1 << 20], 0, 4 << 20);
    const file = craftedFile(dir, "aliased.safetensors", header, 4 << 20);
    expectRefusedCheaply(() => readSafetensors(file), file, /tensor 't\d+' bytes \[0, 4194304\) overlap tensor 't\d+' \[0, 4194304\)/);
  });

  it("refuses overlapping ranges", () => {
    const file = craftedFile(dir, "overlap.safetensors", { a: f32([4], 0, 16), b: f32([4], 8, 24) }, 24);
    expectRefusedCheaply(() => readSafetensors(file), file, /'b' bytes \[8, 24\) overlap tensor 'a' \[0, 16\)/);
  });

  it("refuses a range beyond the file", () => {
    const file = craftedFile(dir, "beyond.safetensors", { a: f32([1 << 28], 0, 2 ** 30) }, 16);
    expectRefusedCheaply(() => readSafetensors(file), file, /'a' data_offsets \[0, 1073741824\) lie outside the 16-byte data section/);
  });

  it("refuses a header length beyond the file or above 100 MB", () => {
    const beyond = craftedFile(dir, "header-beyond.safetensors", { a: f32([1], 0, 4) }, 4, { headerLength: 5000n });
    expectRefusedCheaply(() => readSafetensors(beyond), beyond, /header length 5000 does not fit in the \d+-byte file/);
    const huge = craftedFile(dir, "header-huge.safetensors", {}, 0, { headerLength: 2n ** 63n });
    expectRefusedCheaply(() => readSafetensors(huge), huge, /header length 9223372036854775808 is above the limit of 100000000 bytes/);
  });

  it("refuses huge, negative and fractional dimensions", () => {
    const huge = craftedFile(dir, "huge-dims.safetensors", { a: f32([1e15, 1e15], 0, 16) }, 16);
    expectRefusedCheaply(() => readSafetensors(huge), huge, /'a' float32\[.*\] needs more than 9007199254740991 bytes but data_offsets \[0, 16\) cover 16/);
    const negative = craftedFile(dir, "negative-dims.safetensors", { a: f32([-4], 0, 16) }, 16);
    expectRefusedCheaply(() => readSafetensors(negative), negative, /'a' has invalid shape \[-4\]/);
    const fractional = craftedFile(dir, "fractional-dims.safetensors", { a: f32([2.5], 0, 10) }, 10);
    expectRefusedCheaply(() => readSafetensors(fractional), fractional, /'a' has invalid shape \[2.5\]/);
  });

  it("refuses a byte size that does not match shape x dtype", () => {
    const file = craftedFile(dir, "wrong-size.safetensors", { a: f32([3], 0, 8) }, 8);
    expectRefusedCheaply(() => readSafetensors(file), file, /'a' float32\[3\] needs 12 bytes but data_offsets \[0, 8\) cover 8/);
  });

  it("refuses unknown dtypes", () => {
    const file = craftedFile(dir, "dtype.safetensors", { a: { dtype: "F8_E4M3", shape: [4], data_offsets: [0, 4] } }, 4);
    expectRefusedCheaply(() => readSafetensors(file), file, /'a' has unsupported dtype "F8_E4M3" \(supported: F32/);
  });

  it("refuses gaps and trailing bytes (the ranges must tile the data section)", () => {
    const gap = craftedFile(dir, "gap.safetensors", { a: f32([1], 0, 4), b: f32([1], 8, 12) }, 12);
    expectRefusedCheaply(() => readSafetensors(gap), gap, /bytes \[4, 8\) before tensor 'b' belong to no tensor/);
    const trailing = craftedFile(dir, "trailing.safetensors", { a: f32([1], 0, 4) }, 1 << 20);
    expectRefusedCheaply(() => readSafetensors(trailing), trailing, /1048576 bytes but its tensors cover only \[0, 4\)/);
  });

  it("refuses entries and metadata that are not objects", () => {
    const entry = craftedFile(dir, "entry.safetensors", { a: 7 }, 0);
    expectRefusedCheaply(() => readSafetensors(entry), entry, /tensor 'a' is not a JSON object/);
    const meta = craftedFile(dir, "meta.safetensors", { __metadata__: "x" }, 0);
    expectRefusedCheaply(() => readSafetensors(meta), meta, /__metadata__ is not a JSON object/);
  });

  it("refuses a file truncated after its header was written", () => {
    const file = craftedFile(dir, "whole.safetensors", { a: f32([4], 0, 16) }, 16);
    expect(readSafetensors(file).tensors.get("a")!.shape).toEqual([4]);
    fs.truncateSync(file, fs.statSync(file).size - 4);
    expectRefusedCheaply(() => readSafetensors(file), file, /lie outside the 12-byte data section/);
  });

  it("accepts zero-size tensors sharing an offset, and reads tensors at unaligned offsets into aligned storage", () => {
    const header = { e1: f32([0], 0, 0), u: { dtype: "U8", shape: [1], data_offsets: [0, 1] }, e2: f32([0, 3], 1, 1), x: f32([2], 1, 9) };
    const json = JSON.stringify(header);
    const bytes = handBuilt(json, [7, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40]);
    const file = path.join(dir, "unaligned.safetensors");
    fs.writeFileSync(file, bytes);
    for (const read of [() => readSafetensors(file), () => decodeSafetensors(bytes, file)]) {
      const { tensors } = read();
      expect([...tensors.get("x")!.data]).toEqual([1, 2]);
      expect(tensors.get("x")!.data.byteOffset % 4).toBe(0);
      expect([...tensors.get("u")!.data]).toEqual([7]);
      expect(tensors.get("e2")!.shape).toEqual([0, 3]);
    }
    const info = readSafetensorsHeader(file);
    expect(info.entries.map((e) => e.name)).toEqual(["e1", "u", "e2", "x"]);
  });

  it("refuses a header longer than the caller's maxHeaderBytes on its length alone, and reads one that fits", () => {
    const file = craftedFile(dir, "header-long.safetensors", { a: f32([4], 0, 16) }, 16);
    const length = Number(fs.readFileSync(file).readBigUInt64LE(0));
    for (const read of [
      (limit: number) => readSafetensors(file, { maxHeaderBytes: limit }),
      (limit: number) => readSafetensorsHeader(file, { maxHeaderBytes: limit }),
    ]) {
      expectRefusedCheaply(() => read(length - 1), file, new RegExp(`header length ${length} is above the limit of ${length - 1} bytes`));
      expect(() => read(length)).not.toThrow();
    }
  });

  it("runs the caller's check on the header before reading any tensor", () => {
    const file = craftedFile(dir, "checked.safetensors", { a: f32([4], 0, 16) }, 16);
    expect(() =>
      readSafetensors(file, {
        check: (h) => {
          throw new Error(`refused ${h.entries.length} entries of ${h.dataLength} bytes`);
        },
      }),
    ).toThrow("refused 1 entries of 16 bytes");
  });
});
