/**
 * Turning the `CommBuffer` argument of every operation into a Tensor, and the
 * element copies the backends move data with. Nothing here communicates.
 */
import { Tensor, type DType, type Storage } from "@ulysses/tensors";
import type { CommBuffer } from "./types.js";
import { CollectiveError } from "./errors.js";

type Copyable = { set(v: ArrayLike<number> | ArrayLike<bigint>, offset?: number): void; subarray(a: number, b: number): Copyable & ArrayLike<number> };

/** The dtype a bare TypedArray stands for (a Uint16Array is taken as float16 bits). */
export function dtypeOfArray(data: Storage): DType {
  if (data instanceof Float32Array) return "float32";
  if (data instanceof Float64Array) return "float64";
  if (data instanceof Uint16Array) return "float16";
  if (data instanceof Int32Array) return "int32";
  if (data instanceof BigInt64Array) return "int64";
  if (data instanceof Uint8Array) return "uint8";
  throw new CollectiveError(`unsupported buffer ${Object.prototype.toString.call(data)}: pass a Tensor or a Float32/Float64/Uint16/Int32/BigInt64/Uint8 array`);
}

/** A Tensor as is; a bare TypedArray as a 1-D tensor over the same memory. */
export function asTensor(buffer: CommBuffer): Tensor {
  if (buffer instanceof Tensor) return buffer;
  if (ArrayBuffer.isView(buffer)) return new Tensor(dtypeOfArray(buffer), [buffer.length], buffer);
  throw new CollectiveError(`expected a Tensor or a TypedArray, got ${Object.prototype.toString.call(buffer)}`);
}

/** Elements per axis-0 row of `shape` (1 for a 1-D tensor). */
export function rowElements(shape: readonly number[]): number {
  let n = 1;
  for (let i = 1; i < shape.length; i++) n *= shape[i]!;
  return n;
}

/** Copies `count` elements from src[srcOffset..] to dst[dstOffset..] (same element type). */
export function copyElements(dst: Storage, dstOffset: number, src: Storage, srcOffset: number, count: number): void {
  if (count <= 0) return;
  (dst as unknown as Copyable).set((src as unknown as Copyable).subarray(srcOffset, srcOffset + count), dstOffset);
}

/** A view of `count` elements of `dtype` storage on `buffer` at `byteOffset`. */
export function storageView(like: Storage, buffer: ArrayBufferLike, byteOffset: number, count: number): Storage {
  const ctor = like.constructor as new (b: ArrayBufferLike, o: number, l: number) => Storage;
  return new ctor(buffer, byteOffset, count);
}
