/**
 * A safetensors file written tensor by tensor: the header is built from the
 * tensors' names, dtypes and shapes alone (sorted by name, offsets in that
 * order, padded with spaces to a multiple of 8 bytes, as `encodeSafetensors`
 * does), then each tensor's bytes are asked for and written in turn, so at
 * most one tensor's bytes are held; writeFileAtomic puts the file in place
 * once complete and flushed.
 */
import { bytesPerElement, type DType } from "@ulysses/tensors";
import { writeFileAtomic, writeFileAtomicAsync } from "./atomic-write.js";
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

/** Tensors in the order a streamed file holds them and asks for their bytes (by name). */
export function streamedOrder<T extends { readonly name: string }>(tensors: readonly T[]): T[] {
  return [...tensors].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** The file's head (length and padded JSON header) and its tensors in file order (by name). */
function streamedHead(target: string, tensors: readonly StreamedTensor[], metadata: Record<string, string>): { head: Uint8Array; sorted: StreamedTensor[] } {
  const sorted = streamedOrder(tensors);
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
  return { head, sorted };
}

function wrongSize(target: string, t: StreamedTensor, bytes: number): ModelError {
  return new ModelError(`'${target}': tensor '${t.name}' gave ${bytes} bytes, its header says ${tensorBytes(t)}`);
}

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
  const { head, sorted } = streamedHead(target, tensors, metadata);
  writeFileAtomic(
    target,
    (function* chunks() {
      yield head;
      for (const t of sorted) {
        const bytes = bytesOf(t);
        if (bytes.byteLength !== tensorBytes(t)) throw wrongSize(target, t, bytes.byteLength);
        yield bytes;
      }
    })(),
  );
}

/**
 * writeSafetensorsStreamed from asynchronous parts: `partsOf(tensor)` gives
 * each tensor's bytes as a run of parts (together exactly tensorBytes(tensor)),
 * each written before the next is asked for, so parts may reuse one buffer.
 */
export async function writeSafetensorsStreamedAsync(
  target: string,
  tensors: readonly StreamedTensor[],
  partsOf: (tensor: StreamedTensor) => AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
  metadata: Record<string, string> = {},
): Promise<void> {
  const { head, sorted } = streamedHead(target, tensors, metadata);
  await writeFileAtomicAsync(
    target,
    (async function* chunks() {
      yield head;
      for (const t of sorted) {
        let bytes = 0;
        for await (const part of partsOf(t)) {
          bytes += part.byteLength;
          if (bytes > tensorBytes(t)) throw wrongSize(target, t, bytes);
          yield part;
        }
        if (bytes !== tensorBytes(t)) throw wrongSize(target, t, bytes);
      }
    })(),
  );
}
