/**
 * The safetensors file format, read and written by hand: an 8-byte
 * little-endian header length, a JSON header mapping each tensor name to
 * {dtype, shape, data_offsets: [begin, end)} (offsets relative to the byte
 * buffer after the header) plus an optional `__metadata__` string map, then
 * the raw little-endian tensor bytes. Tensors are written sorted by name and
 * the header is padded with spaces to a multiple of 8 bytes. What the tensors
 * mean (checkpoints) is `checkpoint.ts`'s business.
 *
 * Reading treats the file as untrusted data, as the reference implementation
 * (huggingface/safetensors `validate`) does: the header is at most 100 MB and
 * inside the file; every entry has a known dtype, a shape of non-negative safe
 * integers and a byte range whose length is exactly numel x element size; the
 * ranges, sorted, tile the data section exactly (no overlap, so no two tensors
 * alias the same bytes; no gap; nothing after the last one). So the tensors of
 * a file never hold more bytes than the file, and `readSafetensors` allocates
 * at most the file's data section (it reads each tensor's bytes straight into
 * that tensor's own storage; nothing else of that size is held).
 */
import fs from "node:fs";
import { Tensor, allocateStorage, bytesPerElement, formatShape, type DType } from "@ulysses/tensors";
import { WRITE_CHUNK_BYTES, writeFileAtomic } from "./atomic-write.js";
import { ModelError } from "./errors.js";
import { errnoText } from "./files/errno.js";

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

/** Refuse headers larger than this (the reference implementation's limit, 100 MB). */
export const MAX_SAFETENSORS_HEADER_BYTES = 100_000_000;

export interface SafetensorsContents {
  tensors: Map<string, Tensor>;
  metadata: Record<string, string>;
}

/** One validated header entry: where its bytes lie in the data section. */
export interface SafetensorsEntry {
  readonly name: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
  /** Byte range [begin, end) relative to the start of the data section. */
  readonly begin: number;
  readonly end: number;
}

/** A validated header: nothing of the tensors' size has been allocated yet. */
export interface SafetensorsHeader {
  /** The file (or `<bytes>`) named in errors. */
  readonly source: string;
  /** Byte length of the JSON header (the data section starts at 8 + this). */
  readonly headerLength: number;
  /** Byte length of the data section. */
  readonly dataLength: number;
  /** Entries in file order (ascending byte range). */
  readonly entries: readonly SafetensorsEntry[];
  readonly metadata: Record<string, string>;
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

/** The header length from the first 8 bytes, checked against the bound and the file size. */
function headerLengthOf(first8: Uint8Array, fileSize: number, source: string, limit = MAX_SAFETENSORS_HEADER_BYTES): number {
  if (fileSize < 8 || first8.byteLength < 8) throw new ModelError(`'${source}' is not a safetensors file: ${fileSize} bytes, need at least 8`);
  const length = new DataView(first8.buffer, first8.byteOffset, 8).getBigUint64(0, true);
  if (length > BigInt(limit)) {
    throw new ModelError(`'${source}': safetensors header length ${length} is above the limit of ${limit} bytes`);
  }
  const headerLength = Number(length);
  if (8 + headerLength > fileSize) {
    throw new ModelError(
      `'${source}': safetensors header length ${headerLength} does not fit in the ${fileSize}-byte file (8 + ${headerLength} > ${fileSize})`,
    );
  }
  return headerLength;
}

function describe(value: unknown): string {
  const text = JSON.stringify(value);
  return text === undefined ? String(value) : text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

/** Parses and validates the JSON header against a data section of `dataLength` bytes. */
function parseHeader(json: Uint8Array, headerLength: number, dataLength: number, source: string): SafetensorsHeader {
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(json));
  } catch (cause) {
    throw new ModelError(`'${source}': the safetensors header is not valid JSON: ${(cause as Error).message}`, { cause });
  }
  if (header === null || typeof header !== "object" || Array.isArray(header)) throw new ModelError(`'${source}': the safetensors header is not a JSON object`);
  const metadata: Record<string, string> = {};
  const entries: SafetensorsEntry[] = [];
  for (const [name, entry] of Object.entries(header as Record<string, unknown>)) {
    if (name === "__metadata__") {
      if (entry === null || typeof entry !== "object" || Array.isArray(entry))
        throw new ModelError(`'${source}': __metadata__ is not a JSON object of strings`);
      for (const [key, value] of Object.entries(entry as Record<string, unknown>)) {
        if (typeof value !== "string") throw new ModelError(`'${source}': metadata '${key}' is not a string`);
        metadata[key] = value;
      }
      continue;
    }
    if (entry === null || typeof entry !== "object" || Array.isArray(entry))
      throw new ModelError(`'${source}': tensor '${name}' is not a JSON object: ${describe(entry)}`);
    const { dtype: code, shape, data_offsets: offsets } = entry as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    const dtype = typeof code === "string" ? DTYPE_OF_CODE.get(code) : undefined;
    if (dtype === undefined) {
      throw new ModelError(`'${source}': tensor '${name}' has unsupported dtype ${describe(code)} (supported: ${[...DTYPE_OF_CODE.keys()].join(", ")})`);
    }
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && (d as number) >= 0)) {
      throw new ModelError(`'${source}': tensor '${name}' has invalid shape ${describe(shape)} (dimensions must be non-negative integers)`);
    }
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((o) => Number.isSafeInteger(o) && (o as number) >= 0)) {
      throw new ModelError(`'${source}': tensor '${name}' has invalid data_offsets ${describe(offsets)} (need [begin, end], non-negative integers)`);
    }
    const [begin, end] = offsets as [number, number];
    if (begin > end || end > dataLength) {
      throw new ModelError(`'${source}': tensor '${name}' data_offsets [${begin}, ${end}) lie outside the ${dataLength}-byte data section`);
    }
    // numel x element size, stopping once past 2^53 (so never an inexact or infinite number)
    const dims = shape as number[];
    let bytes = dims.includes(0) ? 0 : bytesPerElement(dtype);
    for (const d of dims) {
      bytes *= d;
      if (bytes > Number.MAX_SAFE_INTEGER) break;
    }
    if (end - begin !== bytes) {
      const needs = bytes > Number.MAX_SAFE_INTEGER ? `more than ${Number.MAX_SAFE_INTEGER}` : String(bytes);
      throw new ModelError(
        `'${source}': tensor '${name}' ${dtype}${formatShape(dims)} needs ${needs} bytes but data_offsets [${begin}, ${end}) cover ${end - begin}`,
      );
    }
    entries.push({ name, dtype, shape: dims, begin, end });
  }
  // the ranges must tile the data section: sorted, each starts where the last ended, the last ends at the end
  entries.sort((a, b) => a.begin - b.begin || a.end - b.end);
  let at = 0;
  let previous: SafetensorsEntry | null = null;
  for (const e of entries) {
    if (e.begin < at) {
      throw new ModelError(
        `'${source}': tensor '${e.name}' bytes [${e.begin}, ${e.end}) overlap tensor '${previous!.name}' [${previous!.begin}, ${previous!.end}); ` +
          `tensors may not share or alias bytes`,
      );
    }
    if (e.begin > at) {
      throw new ModelError(`'${source}': gap in the data section: bytes [${at}, ${e.begin}) before tensor '${e.name}' belong to no tensor`);
    }
    at = e.end;
    previous = e;
  }
  if (at !== dataLength) {
    throw new ModelError(
      `'${source}': the data section has ${dataLength} bytes but its tensors cover only [0, ${at}); ${dataLength - at} trailing bytes belong to no tensor`,
    );
  }
  return { source, headerLength, dataLength, entries, metadata };
}

/** Validates the header of in-memory safetensors bytes (nothing of the tensors' size is allocated). */
export function decodeSafetensorsHeader(bytes: Uint8Array, source = "<bytes>"): SafetensorsHeader {
  const headerLength = headerLengthOf(bytes.subarray(0, 8), bytes.byteLength, source);
  return parseHeader(bytes.subarray(8, 8 + headerLength), headerLength, bytes.byteLength - 8 - headerLength, source);
}

function tensorOf(entry: SafetensorsEntry, fill: (target: Uint8Array) => void): Tensor {
  const elementBytes = bytesPerElement(entry.dtype);
  const length = (entry.end - entry.begin) / elementBytes;
  const storage = allocateStorage(entry.dtype, length);
  fill(new Uint8Array(storage.buffer, storage.byteOffset, storage.byteLength));
  return new Tensor(entry.dtype, [...entry.shape], storage);
}

/** Decodes safetensors bytes; tensors get fresh, aligned storage. `source` names the file in errors. */
export function decodeSafetensors(bytes: Uint8Array, source = "<bytes>"): SafetensorsContents {
  const header = decodeSafetensorsHeader(bytes, source);
  const data = bytes.subarray(8 + header.headerLength);
  const tensors = new Map<string, Tensor>();
  for (const e of header.entries)
    tensors.set(
      e.name,
      tensorOf(e, (target) => target.set(data.subarray(e.begin, e.end))),
    );
  return { tensors, metadata: header.metadata };
}

/** Writes a safetensors file atomically. */
export function writeSafetensors(file: string, tensors: ReadonlyMap<string, Tensor> | Record<string, Tensor>, metadata: Record<string, string> = {}): void {
  writeFileAtomic(file, encodeSafetensors(tensors, metadata));
}

function readExactly(fd: number, target: Uint8Array, position: number, file: string, what: string): void {
  let done = 0;
  while (done < target.byteLength) {
    // at most 1 GiB a call: fs.readSync refuses a length past 2^31 - 1 (a multi-GiB checkpoint's weights tensor)
    const n = fs.readSync(fd, target, done, Math.min(target.byteLength - done, WRITE_CHUNK_BYTES), position + done);
    if (n === 0)
      throw new ModelError(`'${file}': the file ended while reading ${what} (${done} of ${target.byteLength} bytes at offset ${position}); was it truncated?`);
    done += n;
  }
}

function withFile<T>(file: string, body: (fd: number, size: number) => T): T {
  let fd: number;
  let size: number;
  try {
    fd = fs.openSync(file, "r");
  } catch (cause) {
    throw new ModelError(`could not read safetensors file '${file}': ${errnoText(cause)}`, { cause });
  }
  try {
    try {
      const stat = fs.fstatSync(fd);
      if (!stat.isFile()) throw new ModelError(`could not read safetensors file '${file}': not a regular file`);
      size = stat.size;
    } catch (cause) {
      if (cause instanceof ModelError) throw cause;
      throw new ModelError(`could not read safetensors file '${file}': ${(cause as Error).message}`, { cause });
    }
    return body(fd, size);
  } catch (cause) {
    if (cause instanceof ModelError) throw cause;
    throw new ModelError(`could not read safetensors file '${file}': ${(cause as Error).message}`, { cause });
  } finally {
    fs.closeSync(fd);
  }
}

function headerOfFile(fd: number, size: number, file: string, maxHeaderBytes?: number): SafetensorsHeader {
  const first8 = new Uint8Array(8);
  if (size >= 8) readExactly(fd, first8, 0, file, "the header length");
  const headerLength = headerLengthOf(first8, size, file, Math.min(maxHeaderBytes ?? MAX_SAFETENSORS_HEADER_BYTES, MAX_SAFETENSORS_HEADER_BYTES));
  const json = new Uint8Array(headerLength);
  readExactly(fd, json, 8, file, "the header");
  return parseHeader(json, headerLength, size - 8 - headerLength, file);
}

/** How much of an untrusted file a reader accepts. */
export interface SafetensorsLimits {
  /**
   * Longest JSON header accepted (bytes; at most MAX_SAFETENSORS_HEADER_BYTES,
   * the default). Checked on the 8-byte length, before the header is read.
   */
  maxHeaderBytes?: number;
}

/** Reads and validates only the header of a safetensors file. */
export function readSafetensorsHeader(file: string, limits: SafetensorsLimits = {}): SafetensorsHeader {
  return withFile(file, (fd, size) => headerOfFile(fd, size, file, limits.maxHeaderBytes));
}

export interface ReadSafetensorsOptions extends SafetensorsLimits {
  /**
   * Runs on the validated header before any tensor is allocated; throw to
   * refuse the file (checkpoints check the model config here).
   */
  check?(header: SafetensorsHeader): void;
}

/**
 * Reads a safetensors file. The header is validated first (see the top of
 * this file); each tensor's bytes are then read straight into its own
 * storage, so at most the file's data section is allocated.
 */
export function readSafetensors(file: string, options: ReadSafetensorsOptions = {}): SafetensorsContents {
  const tensors = new Map<string, Tensor>();
  const header = withCheckedHeader(file, options, (h, read) => {
    for (const e of h.entries)
      tensors.set(
        e.name,
        tensorOf(e, (target) => read(e, target, 0)),
      );
  });
  return { tensors, metadata: header.metadata };
}

/**
 * Reads the tensors of a safetensors file one at a time, in file order: the
 * header is validated first (and handed to `check`), then each entry that
 * `wanted` accepts is read into its own storage and given to `use`, which
 * keeps nothing of it past the call unless it copies it. At most one tensor's
 * bytes are allocated at a time.
 */
export function forEachSafetensor(
  file: string,
  wanted: (entry: SafetensorsEntry) => boolean,
  use: (entry: SafetensorsEntry, tensor: Tensor) => void,
  options: ReadSafetensorsOptions = {},
): SafetensorsHeader {
  return withCheckedHeader(file, options, (header, read) => {
    for (const e of header.entries) {
      if (!wanted(e)) continue;
      use(
        e,
        tensorOf(e, (target) => read(e, target, 0)),
      );
    }
  });
}

/**
 * Opens `file`, reads and validates its header, hands it to options.check,
 * then to `body` with a reader of an entry's bytes from `offset` into a target.
 */
function withCheckedHeader(
  file: string,
  options: ReadSafetensorsOptions,
  body: (header: SafetensorsHeader, read: (e: SafetensorsEntry, target: Uint8Array, offset: number) => void) => void,
): SafetensorsHeader {
  return withFile(file, (fd, size) => {
    const header = headerOfFile(fd, size, file, options.maxHeaderBytes);
    options.check?.(header);
    const start = 8 + header.headerLength;
    body(header, (e, target, offset) => readExactly(fd, target, start + e.begin + offset, file, `tensor '${e.name}'`));
    return header;
  });
}

/** Where a range of a tensor's bytes goes: into `target`, starting `offset` bytes into the tensor. */
export interface SafetensorsRange {
  target: Uint8Array;
  offset: number;
}

/**
 * Reads ranges of a safetensors file's tensors straight into caller memory:
 * the header is validated first (and handed to `check`), then `place(entry)`
 * says where each wanted tensor's bytes go (null: skip it), and exactly
 * target.byteLength bytes from `offset` into the tensor are read there. A
 * range past the tensor's end is refused. Nothing but the header is
 * allocated: a rank reads its slice of a vector, or a parameter into the
 * model's own storage.
 */
export function readSafetensorRanges(
  file: string,
  place: (entry: SafetensorsEntry) => SafetensorsRange | null,
  options: ReadSafetensorsOptions = {},
): SafetensorsHeader {
  return withCheckedHeader(file, options, (header, read) => {
    for (const e of header.entries) {
      const range = place(e);
      if (range === null) continue;
      const { target, offset } = range;
      if (!Number.isSafeInteger(offset) || offset < 0 || offset + target.byteLength > e.end - e.begin)
        throw new ModelError(`'${file}': bytes [${offset}, ${offset + target.byteLength}) of tensor '${e.name}' lie past its ${e.end - e.begin} bytes`);
      read(e, target, offset);
    }
  });
}
