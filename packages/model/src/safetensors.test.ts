import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { Tensor } from "@ulysses/tensors";
import { decodeSafetensors, encodeSafetensors, readSafetensors, writeSafetensors } from "./safetensors.js";

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
