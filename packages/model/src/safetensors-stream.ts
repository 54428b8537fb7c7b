/**
 * A safetensors file written tensor by tensor: the header is built from the
 * tensors' names, dtypes and shapes alone (sorted by name, offsets in that
 * order, padded with spaces to a multiple of 8 bytes, as `encodeSafetensors`
 * does), then each tensor's bytes are asked for and written in turn, so at
 * most one tensor's bytes are held. The file goes to a temporary name in the
 * target's directory and is renamed into place once complete and flushed.
 */
import fs from "node:fs";
import path from "node:path";
import { bytesPerElement, type DType } from "@ulysses/tensors";
import { ModelError } from "./errors.js";

const CODES: Partial<Record<DType, string>> = { float32: "F32", float16: "F16", bfloat16: "BF16" };

/** A tensor of a streamed file: what the header says of it. */
export interface StreamedTensor {
  readonly name: string;
  readonly dtype: "float32" | "float16" | "bfloat16";
  readonly shape: readonly number[];
}

/** Bytes of a tensor's data. */
export function tensorBytes(t: StreamedTensor): number {
  return t.shape.reduce((a, b) => a * b, 1) * bytesPerElement(t.dtype);
}

let counter = 0;

/**
 * Writes `tensors` (sorted here by name) to `target`; `bytesOf(tensor)` gives
 * each one's little-endian bytes when its turn comes and must return exactly
 * tensorBytes(tensor) of them.
 */
export function writeSafetensorsStreamed(
  target: string,
  tensors: readonly StreamedTensor[],
  bytesOf: (tensor: StreamedTensor) => Uint8Array,
  metadata: Record<string, string> = {},
): void {
  const sorted = [...tensors].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const header: Record<string, unknown> = {};
  if (Object.keys(metadata).length > 0) header.__metadata__ = metadata;
  let offset = 0;
  for (const t of sorted) {
    if (t.name === "__metadata__" || t.name in header) throw new ModelError(`'${target}': tensor name '${t.name}' is reserved or given twice`);
    const size = tensorBytes(t);
    header[t.name] = { dtype: CODES[t.dtype], shape: [...t.shape], data_offsets: [offset, offset + size] };
    offset += size;
  }
  const json = new TextEncoder().encode(JSON.stringify(header));
  const padded = Math.ceil(json.byteLength / 8) * 8;
  const head = new Uint8Array(8 + padded).fill(0x20);
  new DataView(head.buffer).setBigUint64(0, BigInt(padded), true);
  head.set(json, 8);
  const temp = path.join(path.dirname(target), `.${path.basename(target)}.tmp-${process.pid}-${Date.now()}-${counter++}`);
  let fd: number | undefined;
  const write = (bytes: Uint8Array) => {
    let written = 0;
    while (written < bytes.byteLength) written += fs.writeSync(fd!, bytes, written, bytes.byteLength - written);
  };
  try {
    fd = fs.openSync(temp, "wx");
    write(head);
    for (const t of sorted) {
      const bytes = bytesOf(t);
      if (bytes.byteLength !== tensorBytes(t))
        throw new ModelError(`'${target}': tensor '${t.name}' gave ${bytes.byteLength} bytes, its header says ${tensorBytes(t)}`);
      write(bytes);
    }
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    fd = undefined;
    fs.renameSync(temp, target);
  } catch (cause) {
    if (fd !== undefined) fs.closeSync(fd);
    fs.rmSync(temp, { force: true });
    if (cause instanceof ModelError) throw cause;
    throw new ModelError(`could not write '${target}': ${(cause as Error).message}`, { cause });
  }
}
