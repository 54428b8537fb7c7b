/**
 * Float64 helpers for the reference ops: inputs may be float32 or float64
 * tensors (read as numbers), results are float64 tensors that the reference
 * converts to float32 at its boundary. Nothing here knows about any op.
 */
import { Tensor } from "@ulysses/tensors";

/** A tensor the reference reads as numbers. */
export type Real = Tensor<"float32"> | Tensor<"float64">;
export type F64 = Tensor<"float64">;

/** A float64 copy of `t` with the same shape. */
export function toFloat64(t: Real): F64 {
  return new Tensor("float64", t.shape, Float64Array.from(t.data));
}

/** A float32 copy of `t` (rounded to nearest) with the same shape. */
export function toFloat32(t: Real): Tensor<"float32"> {
  return new Tensor("float32", t.shape, Float32Array.from(t.data));
}

/** A zero-filled float64 tensor. */
export function zeros64(shape: readonly number[]): F64 {
  return new Tensor("float64", shape);
}
