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
import { Tensor, toDTypeInto } from "@ulysses/tensors";
import { TrainingError } from "./errors.js";
import { sumOfSquares } from "./grad-clip.js";

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
  /** The sum of the squared elements, in float64. */
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

/** Multiplies out by `scale` in place (nothing at 1), each product rounded to float32. */
function scaleInPlace(out: Float32Array, scale: number): void {
  if (scale !== 1) for (let i = 0; i < out.length; i++) out[i] = out[i]! * scale;
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
    return sumOfSquares(this.data);
  }

  read(from: number, out: Float32Array, scale: number): void {
    checkRange(this.length, from, out.length);
    out.set(this.data.subarray(from, from + out.length));
    scaleInPlace(out, scale);
  }
}

/** Elements of the float32 scratch a bf16 slice widens into for its sum of squares. */
const WIDEN_ELEMENTS = 1 << 16;

class Bfloat16SliceGradients implements SliceGradients {
  readonly dtype = "bfloat16";
  /** bf16 bit patterns. */
  readonly bits: Uint16Array;
  /** One element widened to float32 (addInto's reads). */
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

  /** Elements [from, from + n) as a bf16 tensor viewing the slice. */
  private view(from: number, n: number): Tensor<"bfloat16"> {
    return new Tensor("bfloat16", [n], this.bits.subarray(from, from + n));
  }

  addInto(at: number, values: Float32Array): void {
    checkRange(this.length, at, values.length);
    const b = this.bits;
    // the sums in float32, in place in the scratch, then rounded to bf16 to nearest even (toDTypeInto)
    for (let i = 0; i < values.length; i++) {
      this.word[0] = b[at + i]! << 16;
      values[i] = values[i]! + this.wordValue[0]!;
    }
    toDTypeInto(new Tensor("float32", [values.length], values), this.view(at, values.length));
  }

  sumOfSquares(): number {
    const widened = new Float32Array(Math.min(WIDEN_ELEMENTS, this.length));
    let sum = 0;
    for (let from = 0; from < this.length; from += widened.length) {
      const part = widened.subarray(0, Math.min(widened.length, this.length - from));
      this.read(from, part, 1);
      sum += sumOfSquares(part);
    }
    return sum;
  }

  read(from: number, out: Float32Array, scale: number): void {
    checkRange(this.length, from, out.length);
    // widening is exact
    toDTypeInto(this.view(from, out.length), new Tensor("float32", [out.length], out));
    scaleInPlace(out, scale);
  }
}
