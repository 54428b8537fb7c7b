/**
 * Arrays on fresh ArrayBuffers that are not zero-filled (Buffer.allocUnsafeSlow:
 * not from Node's shared pool, so each has its own buffer at offset 0), for
 * outputs a kernel writes whole: ONNX Runtime's in NativeSessionCache, the
 * native ops' in FusedOps. Zero-filling a multi-megabyte output is one more
 * pass over memory that the kernel then overwrites.
 */

/** An array of `count` elements whose values are whatever the allocator left there. */
export function unfilled(dtype: "float32" | "int32", count: number): Float32Array | Int32Array {
  if (count === 0) return dtype === "float32" ? new Float32Array(0) : new Int32Array(0);
  const buffer = Buffer.allocUnsafeSlow(count * 4).buffer;
  return dtype === "float32" ? new Float32Array(buffer, 0, count) : new Int32Array(buffer, 0, count);
}

/** A Float32Array of `count` elements, not zero-filled (unfilled's float32 case). */
export function unfilledFloat32(count: number): Float32Array {
  return unfilled("float32", count) as Float32Array;
}
