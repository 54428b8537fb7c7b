/**
 * Element types and their storage. A dtype names how elements are stored; it
 * says nothing about where computation happens (that is the kernels' job).
 *
 * float16 and bfloat16 are stored as raw bit patterns in a Uint16Array; use
 * the conversion functions in `convert.ts` to read or write them as numbers.
 */
import { TensorError } from "./errors.js";

export type DType = "float32" | "float64" | "float16" | "bfloat16" | "int32" | "int64" | "uint8";

export interface StorageByDType {
  float32: Float32Array;
  float64: Float64Array;
  float16: Uint16Array;
  bfloat16: Uint16Array;
  int32: Int32Array;
  int64: BigInt64Array;
  uint8: Uint8Array;
}

export type Storage = StorageByDType[DType];

export const DTYPES: readonly DType[] = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"];

const BYTES: Record<DType, number> = {
  float32: 4,
  float64: 8,
  float16: 2,
  bfloat16: 2,
  int32: 4,
  int64: 8,
  uint8: 1,
};

/** Bytes per element of `dtype`. */
export function bytesPerElement(dtype: DType): number {
  const bytes = BYTES[dtype];
  if (bytes === undefined) throw new TensorError(`unknown dtype '${String(dtype)}'; known: ${DTYPES.join(", ")}`);
  return bytes;
}

export function isDType(value: unknown): value is DType {
  return typeof value === "string" && (DTYPES as readonly string[]).includes(value);
}

/** Allocates storage for `length` elements, on `buffer` (at `byteOffset`) when given. */
export function allocateStorage<D extends DType>(dtype: D, length: number, buffer?: ArrayBufferLike, byteOffset = 0): StorageByDType[D] {
  const make = (ctor: { new (b: ArrayBufferLike, o: number, l: number): Storage; new (l: number): Storage }) =>
    buffer === undefined ? new ctor(length) : new ctor(buffer, byteOffset, length);
  switch (dtype) {
    case "float32":
      return make(Float32Array as never) as StorageByDType[D];
    case "float64":
      return make(Float64Array as never) as StorageByDType[D];
    case "float16":
    case "bfloat16":
      return make(Uint16Array as never) as StorageByDType[D];
    case "int32":
      return make(Int32Array as never) as StorageByDType[D];
    case "int64":
      return make(BigInt64Array as never) as StorageByDType[D];
    case "uint8":
      return make(Uint8Array as never) as StorageByDType[D];
    default:
      throw new TensorError(`unknown dtype '${String(dtype)}'; known: ${DTYPES.join(", ")}`);
  }
}

/** The dtype whose storage class `data` is an instance of (float16/bfloat16 cannot be told apart: `hint` decides). */
export function dtypeOfStorage(data: Storage, hint?: "float16" | "bfloat16"): DType {
  if (data instanceof Float32Array) return "float32";
  if (data instanceof Float64Array) return "float64";
  if (data instanceof Uint16Array) return hint ?? "float16";
  if (data instanceof Int32Array) return "int32";
  if (data instanceof BigInt64Array) return "int64";
  if (data instanceof Uint8Array) return "uint8";
  throw new TensorError(`unsupported storage ${Object.prototype.toString.call(data)}`);
}

/** True when `a` and `b` share at least one byte of memory. */
export function storageOverlaps(a: Storage, b: Storage): boolean {
  return (
    a.buffer === b.buffer && a.byteLength > 0 && b.byteLength > 0 && a.byteOffset < b.byteOffset + b.byteLength && b.byteOffset < a.byteOffset + a.byteLength
  );
}

export function storageMatches(dtype: DType, data: Storage): boolean {
  switch (dtype) {
    case "float32":
      return data instanceof Float32Array;
    case "float64":
      return data instanceof Float64Array;
    case "float16":
    case "bfloat16":
      return data instanceof Uint16Array;
    case "int32":
      return data instanceof Int32Array;
    case "int64":
      return data instanceof BigInt64Array;
    case "uint8":
      return data instanceof Uint8Array;
  }
}
