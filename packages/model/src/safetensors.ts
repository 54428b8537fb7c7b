/**
 * The safetensors file format, read and written by hand: an 8-byte
 * little-endian header length, a JSON header mapping each tensor name to
 * {dtype, shape, data_offsets: [begin, end)} (offsets relative to the byte
 * buffer after the header) plus an optional `__metadata__` string map, then
 * the raw little-endian tensor bytes. Tensors are written sorted by name and
 * the header is padded with spaces to a multiple of 8 bytes. What the tensors
 * mean (checkpoints) is `checkpoint.ts`'s business.
 */
import fs from "node:fs";
import { Tensor, allocateStorage, bytesPerElement, formatShape, numel, type DType } from "@ulysses/tensors";
import { writeFileAtomic } from "./atomic-write.js";
import { ModelError } from "./errors.js";

const CODES: Record<DType, string> = {
  float32: "F32",
  float64: "F64",
  float16: "F16",
  bfloat16: "BF16",
  int32: "I32",
  int64: "I64",
  uint8: "U8",
};
const DTYPE_OF_CODE = new Map(Object.entries(CODES).map(([dtype, code]) => [code, dtype as DType]));

/** Refuse headers larger than this (the reference implementation uses 100 MB). */
const MAX_HEADER_BYTES = 100_000_000;

export interface SafetensorsContents {
  tensors: Map<string, Tensor>;
  metadata: Record<string, string>;
}

/** Encodes tensors and string metadata as safetensors bytes (header chunk, then one chunk per tensor). */
export function encodeSafetensors(tensors: ReadonlyMap<string, Tensor> | Record<string, Tensor>, metadata: Record<string, string> = {}): Uint8Array[] {
  const list: [string, Tensor][] = tensors instanceof Map ? [...(tensors as ReadonlyMap<string, Tensor>)] : Object.entries(tensors as Record<string, Tensor>);
  const entries = list.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const header: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(metadata)) {
    if (typeof value !== "string") throw new ModelError(`safetensors metadata '${key}' must be a string, got ${typeof value}`);
  }
  if (Object.keys(metadata).length > 0) header.__metadata__ = metadata;
  let offset = 0;
  const chunks: Uint8Array[] = [];
  for (const [name, tensor] of entries) {
    if (name === "__metadata__") throw new ModelError("a tensor cannot be named '__metadata__'");
    const bytes = new Uint8Array(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength);
    header[name] = { dtype: CODES[tensor.dtype], shape: [...tensor.shape], data_offsets: [offset, offset + bytes.byteLength] };
    offset += bytes.byteLength;
    chunks.push(bytes);
  }
  let json = JSON.stringify(header);
  const jsonBytes = new TextEncoder().encode(json);
  const padded = Math.ceil(jsonBytes.byteLength / 8) * 8;
  json += " ".repeat(padded - jsonBytes.byteLength);
  const head = new Uint8Array(8 + padded);
  new DataView(head.buffer).setBigUint64(0, BigInt(padded), true);
  head.set(new TextEncoder().encode(json), 8);
  return [head, ...chunks];
}

/** Decodes safetensors bytes; tensors get fresh, aligned storage. `source` names the file in errors. */
export function decodeSafetensors(bytes: Uint8Array, source = "<bytes>"): SafetensorsContents {
  if (bytes.byteLength < 8) throw new ModelError(`'${source}' is not a safetensors file: ${bytes.byteLength} bytes, need at least 8`);
  const headerLength = Number(new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true));
  if (headerLength > MAX_HEADER_BYTES || 8 + headerLength > bytes.byteLength) {
    throw new ModelError(`'${source}': header length ${headerLength} does not fit in the ${bytes.byteLength}-byte file`);
  }
  let header: Record<string, unknown>;
  try {
    header = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(8, 8 + headerLength))) as Record<string, unknown>;
  } catch (cause) {
    throw new ModelError(`'${source}': the safetensors header is not valid JSON: ${(cause as Error).message}`, { cause });
  }
  if (header === null || typeof header !== "object" || Array.isArray(header)) throw new ModelError(`'${source}': the safetensors header is not a JSON object`);
  const data = bytes.subarray(8 + headerLength);
  const metadata: Record<string, string> = {};
  const tensors = new Map<string, Tensor>();
  for (const [name, entry] of Object.entries(header)) {
    if (name === "__metadata__") {
      for (const [key, value] of Object.entries((entry ?? {}) as Record<string, unknown>)) {
        if (typeof value !== "string") throw new ModelError(`'${source}': metadata '${key}' is not a string`);
        metadata[key] = value;
      }
      continue;
    }
    const { dtype: code, shape, data_offsets: offsets } = (entry ?? {}) as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    const dtype = DTYPE_OF_CODE.get(String(code));
    if (dtype === undefined) throw new ModelError(`'${source}': tensor '${name}' has unsupported dtype ${JSON.stringify(code)}`);
    if (!Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && d >= 0)) {
      throw new ModelError(`'${source}': tensor '${name}' has invalid shape ${JSON.stringify(shape)}`);
    }
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((o) => Number.isInteger(o) && o >= 0)) {
      throw new ModelError(`'${source}': tensor '${name}' has invalid data_offsets ${JSON.stringify(offsets)}`);
    }
    const [begin, end] = offsets as [number, number];
    const expected = numel(shape as number[]) * bytesPerElement(dtype);
    if (end - begin !== expected || end > data.byteLength || begin > end) {
      throw new ModelError(
        `'${source}': tensor '${name}' ${dtype}${formatShape(shape as number[])} needs ${expected} bytes but data_offsets [${begin}, ${end}) ` +
          `cover ${end - begin} of a ${data.byteLength}-byte data section`,
      );
    }
    const copy = new Uint8Array(expected);
    copy.set(data.subarray(begin, end));
    tensors.set(name, new Tensor(dtype, shape as number[], allocateStorage(dtype, expected / bytesPerElement(dtype), copy.buffer)));
  }
  return { tensors, metadata };
}

/** Writes a safetensors file atomically. */
export function writeSafetensors(file: string, tensors: ReadonlyMap<string, Tensor> | Record<string, Tensor>, metadata: Record<string, string> = {}): void {
  writeFileAtomic(file, encodeSafetensors(tensors, metadata));
}

/** Reads a safetensors file. */
export function readSafetensors(file: string): SafetensorsContents {
  let bytes: Uint8Array;
  try {
    bytes = fs.readFileSync(file);
  } catch (cause) {
    throw new ModelError(`could not read safetensors file '${file}': ${(cause as Error).message}`, { cause });
  }
  return decodeSafetensors(bytes, file);
}
