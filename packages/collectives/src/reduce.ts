/**
 * Elementwise reductions (sum, mean, max) over the same range of several
 * ranks' buffers, in rank order, for every dtype. Every backend reduces with
 * these functions, so results are bitwise identical across backends.
 *
 * Arithmetic: float32/float64 accumulate in their own precision (each partial
 * sum is rounded to the dtype, ranks added in order 0..P-1); integers wrap as
 * their TypedArray stores do; float16 and bfloat16 (raw bits) accumulate in
 * float32 and are rounded to 16 bits once at the end. mean = sum / P.
 */
import type { DType, Storage } from "@ulysses/tensors";
import type { ReduceOp } from "./types.js";

/** One rank's contribution: `data[offset .. offset + count)`. */
export interface Source {
  data: Storage;
  offset: number;
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

function bf16ToF32(bits: number): number {
  u32[0] = bits << 16;
  return f32[0]!;
}

function f32ToBf16(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  if ((x & 0x7fffffff) > 0x7f800000) return ((x >>> 16) | 0x40) & 0xffff; // NaN stays NaN
  return ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff; // round to nearest even
}

function f16ToF32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >> 10) & 0x1f;
  const frac = bits & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

function roundHalfEven(x: number): number {
  const r = Math.floor(x);
  const d = x - r;
  return d > 0.5 || (d === 0.5 && r % 2 === 1) ? r + 1 : r;
}

function f32ToF16(value: number): number {
  if (Number.isNaN(value)) return 0x7e00;
  const sign = value < 0 || Object.is(value, -0) ? 0x8000 : 0;
  const a = Math.abs(value);
  if (a < 2 ** -14) return sign | roundHalfEven(a * 2 ** 24); // subnormal (0x400 = smallest normal)
  let exp = Math.floor(Math.log2(a));
  if (2 ** exp > a) exp -= 1;
  else if (2 ** (exp + 1) <= a) exp += 1;
  let mant = roundHalfEven((a / 2 ** exp - 1) * 1024);
  if (mant === 1024) {
    mant = 0;
    exp += 1;
  }
  if (exp > 15) return sign | 0x7c00;
  return sign | ((exp + 15) << 10) | mant;
}

function reduceHalf(out: Uint16Array, outOffset: number, sources: readonly Source[], count: number, op: ReduceOp, bf16: boolean): void {
  const toF32 = bf16 ? bf16ToF32 : f16ToF32;
  const fromF32 = bf16 ? f32ToBf16 : f32ToF16;
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
        if (x > out[i]! || x !== x) out[i] = x;
      }
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

export const halfBits = { f16ToF32, f32ToF16, bf16ToF32, f32ToBf16 };
