/**
 * Conversions between float32, float64, float16, bfloat16 and int32, scalar
 * and tensor-wide. Narrowing float conversions round once, to nearest with
 * ties to even, as IEEE 754 does: NaN stays NaN (quiet, sign and top payload
 * bits kept where the target has room), ±Inf stays ±Inf, values at or beyond
 * the overflow threshold become ±Inf, and subnormals are exact. A float64
 * value is rounded directly to the 16-bit format, never through float32
 * (which could round twice). Float to int32 truncates toward zero (as C casts
 * and ONNX Cast do) and refuses NaN, ±Inf and values outside the int32 range.
 *
 * float16 and bfloat16 are raw bit patterns in a Uint16Array (see dtype.ts).
 * Nothing here knows about backends; ONNX Runtime's own Cast is only used by
 * the tests, as an independent reference.
 */
import { storageOverlaps, type DType } from "./dtype.js";
import { TensorError } from "./errors.js";
import { formatShape } from "./shape.js";
import { Tensor } from "./tensor.js";

/** The dtypes `toDType` converts between (in any direction). */
export const CONVERTIBLE_DTYPES = ["float32", "float64", "float16", "bfloat16", "int32"] as const;
export type ConvertibleDType = (typeof CONVERTIBLE_DTYPES)[number];

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
const view64 = new DataView(new ArrayBuffer(8));

/** fp16 bits of the float32 whose bit pattern is `bits` (an unsigned 32-bit integer). */
export function float32BitsToFloat16Bits(bits: number): number {
  const sign = (bits >>> 16) & 0x8000;
  const exponent = (bits >>> 23) & 0xff;
  const mantissa = bits & 0x7fffff;
  if (exponent === 0xff) return mantissa === 0 ? sign | 0x7c00 : sign | 0x7e00 | (mantissa >>> 13);
  const e = exponent - 112; // rebias 127 -> 15
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    // Subnormal (or zero) in fp16: value = m * 2^(e-14) units of 2^-24.
    if (e < -10) return sign; // below 2^-25: rounds to zero
    const m = mantissa | 0x800000;
    const shift = 14 - e; // 14..24
    let half = m >>> shift;
    const rest = m & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (rest > halfway || (rest === halfway && (half & 1) === 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mantissa >>> 13);
  const rest = mantissa & 0x1fff;
  // A carry out of the mantissa bumps the exponent; from 0x7bff it reaches Inf.
  if (rest > 0x1000 || (rest === 0x1000 && (half & 1) === 1)) half++;
  return sign | half;
}

/** bf16 bits of the float32 whose bit pattern is `bits` (an unsigned 32-bit integer). */
export function float32BitsToBfloat16Bits(bits: number): number {
  if ((bits & 0x7fffffff) >>> 0 > 0x7f800000) return (bits >>> 16) | 0x0040; // NaN: keep it NaN, quiet
  return ((bits >>> 0) + 0x7fff + ((bits >>> 16) & 1)) >>> 16;
}

/** 2^n for an integer n in [-1022, 1023], built from its bits (exact). */
function pow2(n: number): number {
  view64.setUint32(0, (n + 1023) << 20);
  view64.setUint32(4, 0);
  return view64.getFloat64(0);
}

/**
 * Rounds a non-NaN float64 `x` to a binary format with `mantissaBits` stored
 * mantissa bits and `exponentBits` exponent bits, ties to even. Used for
 * values that are not exact float32 numbers (float64, int32 beyond 2^24).
 */
function roundNumberToBits(x: number, mantissaBits: number, exponentBits: number): number {
  const bias = (1 << (exponentBits - 1)) - 1;
  const infBits = ((1 << exponentBits) - 1) << mantissaBits;
  view64.setFloat64(0, x);
  const high = view64.getUint32(0);
  const signBit = (high >>> 31) << (mantissaBits + exponentBits);
  const exponentField = (high >>> 20) & 0x7ff;
  if (exponentField === 0) return signBit; // zero or float64 subnormal: far below half the smallest target subnormal
  const a = Math.abs(x);
  const e = exponentField - 1023;
  if (e > bias) return signBit | infBits;
  const emin = 1 - bias;
  const quantumExponent = Math.max(e, emin) - mantissaBits;
  const q = a * pow2(-quantumExponent); // a in units of the target's last place: exact
  let r = Math.floor(q);
  const rest = q - r;
  if (rest > 0.5 || (rest === 0.5 && r % 2 === 1)) r++;
  if (e < emin) return signBit | r; // subnormal; r = 2^mantissaBits is the smallest normal
  return signBit | (((e + bias) << mantissaBits) + r - (1 << mantissaBits));
}

/** fp16 bits of `value`, rounded once to nearest even (any number, float64 included). */
export function float32ToFloat16Bits(value: number): number {
  f32[0] = value;
  if (Number.isNaN(value) || f32[0] === value) return float32BitsToFloat16Bits(u32[0]!);
  return roundNumberToBits(value, 10, 5);
}

/** bf16 bits of `value`, rounded once to nearest even (any number, float64 included). */
export function float32ToBfloat16Bits(value: number): number {
  f32[0] = value;
  if (Number.isNaN(value) || f32[0] === value) return float32BitsToBfloat16Bits(u32[0]!);
  return roundNumberToBits(value, 7, 8);
}

/** float32 bit pattern of the fp16 value `bits` (exact). */
function float16BitsToFloat32Bits(bits: number): number {
  const sign = (bits & 0x8000) << 16;
  const exponent = (bits >>> 10) & 0x1f;
  let mantissa = bits & 0x3ff;
  if (exponent === 0x1f) return (sign | 0x7f800000 | (mantissa << 13)) >>> 0;
  if (exponent !== 0) return (sign | ((exponent + 112) << 23) | (mantissa << 13)) >>> 0;
  if (mantissa === 0) return sign >>> 0;
  // Subnormal fp16: normalise into float32's wider exponent range.
  let e = 113;
  while ((mantissa & 0x400) === 0) {
    mantissa <<= 1;
    e--;
  }
  return (sign | (e << 23) | ((mantissa & 0x3ff) << 13)) >>> 0;
}

let halfTable: Uint32Array | undefined;
let halfTableF32: Float32Array | undefined;

/** float32 bits of all 65536 fp16 patterns (256 KiB, built on first use). */
function halfToFloatTable(): Float32Array {
  if (halfTableF32 === undefined) {
    halfTable = new Uint32Array(65536);
    for (let h = 0; h < 65536; h++) halfTable[h] = float16BitsToFloat32Bits(h);
    halfTableF32 = new Float32Array(halfTable.buffer);
  }
  return halfTableF32;
}

/** The number the fp16 pattern `bits` stands for (exact). */
export function float16BitsToFloat32(bits: number): number {
  return halfToFloatTable()[bits & 0xffff]!;
}

/** The number the bf16 pattern `bits` stands for (exact). */
export function bfloat16BitsToFloat32(bits: number): number {
  u32[0] = (bits & 0xffff) << 16;
  return f32[0]!;
}

function checkConvertible(from: DType, to: DType): void {
  const known = CONVERTIBLE_DTYPES as readonly string[];
  if (!known.includes(from) || !known.includes(to)) {
    throw new TensorError(`toDType: cannot convert ${from} -> ${to}; supported: ${CONVERTIBLE_DTYPES.join(", ")}`);
  }
}

const INT32_MIN = -2147483648;
const INT32_MAX = 2147483647;

function toInt32(value: number, index: number, from: DType): number {
  const truncated = Math.trunc(value);
  if (!(truncated >= INT32_MIN && truncated <= INT32_MAX)) {
    throw new TensorError(
      `toDType ${from} -> int32: element ${index} is ${value}, which has no int32 value (NaN, ±Inf or outside [${INT32_MIN}, ${INT32_MAX}])`,
    );
  }
  return truncated;
}

/** A reader giving element i of `t` as a number (exact for every convertible dtype). */
function numberReader(t: Tensor): (i: number) => number {
  switch (t.dtype) {
    case "float16": {
      const table = halfToFloatTable();
      const d = t.data as Uint16Array;
      return (i) => table[d[i]!]!;
    }
    case "bfloat16": {
      const d = t.data as Uint16Array;
      return (i) => bfloat16BitsToFloat32(d[i]!);
    }
    default: {
      const d = t.data as Float32Array | Float64Array | Int32Array;
      return (i) => d[i]!;
    }
  }
}

/** float32 bit patterns of a float32 tensor's storage (same memory). */
function bitsOf(data: Float32Array): Uint32Array {
  return new Uint32Array(data.buffer, data.byteOffset, data.length);
}

/**
 * Writes `src` converted to `out.dtype` into `out` (same shape; reuse `out` on
 * hot paths). Same-dtype conversion is a copy.
 */
export function toDTypeInto(src: Tensor, out: Tensor): Tensor {
  checkConvertible(src.dtype, out.dtype);
  if (src.rank !== out.rank || src.shape.some((d, i) => d !== out.shape[i])) {
    throw new TensorError(`toDTypeInto: output shape ${formatShape(out.shape)} differs from input shape ${formatShape(src.shape)}`);
  }
  if (storageOverlaps(out.data, src.data) && src.dtype !== out.dtype) {
    throw new TensorError(`toDTypeInto: output ${out} shares memory with input ${src}`);
  }
  const n = src.size;
  const from = src.dtype;
  const to = out.dtype;
  if (from === to || ((from === "float32" || from === "float64" || from === "int32") && (to === "float32" || to === "float64"))) {
    // TypedArray.set converts through Number and rounds to float32 ties-to-even: exact where it must be.
    (out.data as Float32Array).set(src.data as Float32Array);
    return out;
  }
  if (from === "float32" && (to === "float16" || to === "bfloat16")) {
    const s = bitsOf(src.data as Float32Array);
    const o = out.data as Uint16Array;
    const round = to === "float16" ? float32BitsToFloat16Bits : float32BitsToBfloat16Bits;
    for (let i = 0; i < n; i++) o[i] = round(s[i]!);
    return out;
  }
  if (to === "float32" && (from === "float16" || from === "bfloat16")) {
    const s = src.data as Uint16Array;
    const o = bitsOf(out.data as Float32Array);
    if (from === "bfloat16") {
      for (let i = 0; i < n; i++) o[i] = s[i]! << 16;
    } else {
      halfToFloatTable();
      const table = halfTable!;
      for (let i = 0; i < n; i++) o[i] = table[s[i]!]!;
    }
    return out;
  }
  if ((from === "float16" && to === "bfloat16") || (from === "bfloat16" && to === "float16")) {
    // The widening to float32 is exact, so this rounds once.
    const s = src.data as Uint16Array;
    const o = out.data as Uint16Array;
    if (from === "float16") {
      halfToFloatTable();
      const table = halfTable!;
      for (let i = 0; i < n; i++) o[i] = float32BitsToBfloat16Bits(table[s[i]!]!);
    } else {
      for (let i = 0; i < n; i++) o[i] = float32BitsToFloat16Bits(s[i]! << 16);
    }
    return out;
  }
  const read = numberReader(src);
  if (to === "int32") {
    const o = out.data as Int32Array;
    for (let i = 0; i < n; i++) o[i] = toInt32(read(i), i, from);
    return out;
  }
  if (to === "float16" || to === "bfloat16") {
    const o = out.data as Uint16Array;
    const round = to === "float16" ? float32ToFloat16Bits : float32ToBfloat16Bits;
    for (let i = 0; i < n; i++) o[i] = round(read(i));
    return out;
  }
  // float16/bfloat16 -> float64 (int32 and float sources went through set above).
  const o = out.data as Float64Array;
  for (let i = 0; i < n; i++) o[i] = read(i);
  return out;
}

/** A new tensor holding `t` converted to `dtype` (a copy even when the dtype is the same). */
export function toDType<D extends ConvertibleDType>(t: Tensor, dtype: D): Tensor<D> {
  checkConvertible(t.dtype, dtype);
  return toDTypeInto(t, new Tensor(dtype, t.shape)) as Tensor<D>;
}
