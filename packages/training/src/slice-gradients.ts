/**
 * ZeRO-2's summed gradient of one rank's slice of the flat vector, stored in
 * float32 or in bfloat16 (`--precision bf16`: half the bytes). The gradient
 * is made and summed in float32 (the backward's ops, the reduce-scatter);
 * the stored value is rounded to bf16 to nearest even each time a summed
 * part is added, and read back exactly as float32 (scaled by the clip) for
 * AdamW, whose master weights and moments stay float32.
 *
 * Under ZeRO-2 each element of a slice receives one summed part per step
 * (its block's gradient) or two (a tied embedding's: the head's and the
 * lookup's), so a bf16 slice rounds each element's gradient once or twice.
 */
import { float32BitsToBfloat16Bits } from "@ulysses/tensors";
import { TrainingError } from "./errors.js";

/** How a slice's gradient is stored. */
export const GRADIENT_DTYPES = ["float32", "bfloat16"] as const;
export type GradientDtype = (typeof GRADIENT_DTYPES)[number];

export interface SliceGradients {
  readonly dtype: GradientDtype;
  /** Elements of the slice. */
  readonly length: number;
  /** Bytes of the stored gradient. */
  readonly bytes: number;
  /** Sets every element to zero. */
  zero(): void;
  /** Adds `values` into elements [at, at + values.length); `values` is a scratch the call may overwrite. */
  addInto(at: number, values: Float32Array): void;
  /** The sum of the squared elements, in float64 (four running sums, as globalGradNorm). */
  sumOfSquares(): number;
  /** out[i] = element (from + i) x scale, rounded to float32. */
  read(from: number, out: Float32Array, scale: number): void;
}

/** A slice of `length` elements stored in `dtype`. */
export function sliceGradients(length: number, dtype: GradientDtype): SliceGradients {
  if (!Number.isSafeInteger(length) || length < 0) throw new TrainingError(`a slice gradient needs a non-negative integer length, got ${length}`);
  if (dtype === "float32") return new Float32SliceGradients(length);
  if (dtype === "bfloat16") return new Bfloat16SliceGradients(length);
  throw new TrainingError(`gradient dtype must be one of ${GRADIENT_DTYPES.join(", ")}, got ${String(dtype)}`);
}

function checkRange(length: number, at: number, n: number): void {
  if (!Number.isSafeInteger(at) || at < 0 || at + n > length) throw new TrainingError(`elements [${at}, ${at + n}) lie outside the slice of ${length}`);
}

/** Squares of `element(i)` for i in [0, n), in four running sums (i mod 4) added at the end. */
function sumSquares(n: number, element: (i: number) => number): number {
  let s0 = 0;
  let s1 = 0;
  let s2 = 0;
  let s3 = 0;
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const a = element(i);
    const b = element(i + 1);
    const c = element(i + 2);
    const d = element(i + 3);
    s0 += a * a;
    s1 += b * b;
    s2 += c * c;
    s3 += d * d;
  }
  for (; i < n; i++) {
    const a = element(i);
    s0 += a * a;
  }
  return s0 + s1 + (s2 + s3);
}

class Float32SliceGradients implements SliceGradients {
  readonly dtype = "float32";
  readonly data: Float32Array;

  constructor(readonly length: number) {
    this.data = new Float32Array(length);
  }

  get bytes(): number {
    return this.data.byteLength;
  }

  zero(): void {
    this.data.fill(0);
  }

  addInto(at: number, values: Float32Array): void {
    checkRange(this.length, at, values.length);
    const d = this.data;
    for (let i = 0; i < values.length; i++) d[at + i] += values[i]!;
  }

  sumOfSquares(): number {
    const d = this.data;
    return sumSquares(d.length, (i) => d[i]!);
  }

  read(from: number, out: Float32Array, scale: number): void {
    checkRange(this.length, from, out.length);
    const d = this.data;
    if (scale === 1) out.set(d.subarray(from, from + out.length));
    else for (let i = 0; i < out.length; i++) out[i] = d[from + i]! * scale;
  }
}

class Bfloat16SliceGradients implements SliceGradients {
  readonly dtype = "bfloat16";
  /** bf16 bit patterns. */
  readonly bits: Uint16Array;
  /** One element's float32 <-> bits (the reads of sumOfSquares). */
  private readonly word = new Uint32Array(1);
  private readonly wordValue = new Float32Array(this.word.buffer);

  constructor(readonly length: number) {
    this.bits = new Uint16Array(length);
  }

  get bytes(): number {
    return this.bits.byteLength;
  }

  zero(): void {
    this.bits.fill(0);
  }

  addInto(at: number, values: Float32Array): void {
    checkRange(this.length, at, values.length);
    const b = this.bits;
    // the sums in float32, in place in the scratch, then rounded to bf16 from their float32 bits
    const words = new Uint32Array(values.buffer, values.byteOffset, values.length);
    const stored = new Float32Array(1);
    const storedBits = new Uint32Array(stored.buffer);
    for (let i = 0; i < values.length; i++) {
      storedBits[0] = b[at + i]! << 16;
      values[i] = values[i]! + stored[0]!;
      b[at + i] = float32BitsToBfloat16Bits(words[i]!);
    }
  }

  private value(i: number): number {
    this.word[0] = this.bits[i]! << 16;
    return this.wordValue[0]!;
  }

  sumOfSquares(): number {
    return sumSquares(this.length, (i) => this.value(i));
  }

  read(from: number, out: Float32Array, scale: number): void {
    checkRange(this.length, from, out.length);
    const b = this.bits;
    const words = new Uint32Array(out.buffer, out.byteOffset, out.length);
    for (let i = 0; i < out.length; i++) words[i] = b[from + i]! << 16;
    if (scale !== 1) for (let i = 0; i < out.length; i++) out[i] = out[i]! * scale;
  }
}
