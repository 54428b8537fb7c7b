/**
 * Elementwise reductions (sum, mean, max) over the same range of several
 * ranks' buffers, in rank order, for every dtype. Every backend reduces with
 * these functions, so results are bitwise identical across backends.
 *
 * Arithmetic: float32/float64 accumulate in their own precision (each partial
 * sum is rounded to the dtype, ranks added in order 0..P-1); integers wrap as
 * their TypedArray stores do; float16 and bfloat16 (raw bits) accumulate in
 * float32 and are rounded to 16 bits once at the end (conversions from
 * @ulysses/tensors). mean = sum / P.
 */
import { bfloat16BitsToFloat32, float16BitsToFloat32, float32ToBfloat16Bits, float32ToFloat16Bits, type DType, type Storage } from "@ulysses/tensors";
import type { ReduceOp } from "./types.js";

/** One rank's contribution: `data[offset .. offset + count)`. */
export interface Source {
  data: Storage;
  offset: number;
}

function reduceHalf(out: Uint16Array, outOffset: number, sources: readonly Source[], count: number, op: ReduceOp, bf16: boolean): void {
  const toF32 = bf16 ? bfloat16BitsToFloat32 : float16BitsToFloat32;
  const fromF32 = bf16 ? float32ToBfloat16Bits : float32ToFloat16Bits;
  const srcs = sources.map((s) => s.data as Uint16Array);
  const offs = sources.map((s) => s.offset);
  for (let i = 0; i < count; i++) {
    let acc = toF32(srcs[0]![offs[0]! + i]!);
    for (let k = 1; k < srcs.length; k++) {
      const x = toF32(srcs[k]![offs[k]! + i]!);
      acc = op === "max" ? (x > acc || Number.isNaN(x) ? x : acc) : Math.fround(acc + x);
    }
    if (op === "mean") acc = Math.fround(acc / srcs.length);
    out[outOffset + i] = fromF32(acc);
  }
}

function reduceBigInt(out: BigInt64Array, outOffset: number, sources: readonly Source[], count: number, op: ReduceOp): void {
  out.set((sources[0]!.data as BigInt64Array).subarray(sources[0]!.offset, sources[0]!.offset + count), outOffset);
  for (let k = 1; k < sources.length; k++) {
    const src = sources[k]!.data as BigInt64Array;
    const o = sources[k]!.offset;
    if (op === "max") {
      for (let i = 0; i < count; i++) if (src[o + i]! > out[outOffset + i]!) out[outOffset + i] = src[o + i]!;
    } else {
      for (let i = 0; i < count; i++) out[outOffset + i] = out[outOffset + i]! + src[o + i]!;
    }
  }
}

type NumberArray = Float32Array | Float64Array | Int32Array | Uint8Array;

function reduceNumbers(out: NumberArray, outOffset: number, sources: readonly Source[], count: number, op: ReduceOp): void {
  const first = sources[0]!;
  if (first.data !== out || first.offset !== outOffset) out.set((first.data as NumberArray).subarray(first.offset, first.offset + count), outOffset);
  for (let k = 1; k < sources.length; k++) {
    const src = sources[k]!.data as NumberArray;
    const o = sources[k]!.offset - outOffset;
    const end = outOffset + count;
    if (op === "max") {
      for (let i = outOffset; i < end; i++) {
        const x = src[o + i]!;
        if (x > out[i]! || Number.isNaN(x)) out[i] = x;
      }
    } else if (out instanceof Float32Array && k + 2 < sources.length) {
      // three float32 ranks in one pass, rounding after each add exactly as three passes would
      const b = sources[k + 1]!.data as Float32Array;
      const ob = sources[k + 1]!.offset - outOffset;
      const c = sources[k + 2]!.data as Float32Array;
      const oc = sources[k + 2]!.offset - outOffset;
      for (let i = outOffset; i < end; i++) out[i] = Math.fround(Math.fround(out[i]! + src[o + i]!) + b[ob + i]!) + c[oc + i]!;
      k += 2;
    } else {
      for (let i = outOffset; i < end; i++) out[i] += src[o + i]!;
    }
  }
  if (op === "mean") {
    const p = sources.length;
    for (let i = outOffset; i < outOffset + count; i++) out[i] /= p;
  }
}

/**
 * out[outOffset + i] = op over k of sources[k].data[sources[k].offset + i],
 * for i < count, ranks combined in the order given. `out` may be one of the
 * sources only as the first one (same offset).
 */
export function reduceInto(dtype: DType, op: ReduceOp, out: Storage, outOffset: number, sources: readonly Source[], count: number): void {
  if (count <= 0 || sources.length === 0) return;
  if (dtype === "float16" || dtype === "bfloat16") reduceHalf(out as Uint16Array, outOffset, sources, count, op, dtype === "bfloat16");
  else if (dtype === "int64") reduceBigInt(out as BigInt64Array, outOffset, sources, count, op);
  else reduceNumbers(out as NumberArray, outOffset, sources, count, op);
}
