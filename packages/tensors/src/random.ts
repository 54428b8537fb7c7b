/**
 * Seeded random numbers that are the same on every run, in every process and
 * in every worker for the same (seed, stream): Philox4x32-10 (Salmon et al.,
 * "Parallel random numbers: as easy as 1, 2, 3", SC 2011), a counter-based
 * generator. The 64-bit seed is the key; the 128-bit counter holds a 64-bit
 * block index (words 0-1) and the 64-bit stream (words 2-3), so streams never
 * overlap and any position can be restored from a few integers.
 *
 * Uniforms use 53 random bits; normals use Box–Muller (the second value of
 * each pair is kept for the next call and is part of the state). Math.log,
 * Math.cos and Math.sin are V8's own deterministic implementations, so the
 * numbers do not depend on the machine's libm. Tensor helpers live in
 * `random-tensor.ts`.
 */
import { TensorError } from "./errors.js";

/** Philox4x32 round multipliers and key increments (the Weyl constants). */
const M0 = 0xd2511f53;
const M1 = 0xcd9e8d57;
const W0 = 0x9e3779b9;
const W1 = 0xbb67ae85;

/** High 32 bits of the 64-bit product of two unsigned 32-bit integers. */
function mulHigh(a: number, b: number): number {
  const aLow = a & 0xffff;
  const aHigh = a >>> 16;
  const bLow = b & 0xffff;
  const bHigh = b >>> 16;
  const lowHigh = aLow * bHigh;
  const highLow = aHigh * bLow;
  const middle = ((aLow * bLow) >>> 16) + (lowHigh & 0xffff) + (highLow & 0xffff);
  return (aHigh * bHigh + (lowHigh >>> 16) + (highLow >>> 16) + (middle >>> 16)) >>> 0;
}

/**
 * One Philox4x32-10 block: encrypts `counter` (4 words) under `key` (2 words)
 * and writes 4 random words to `out`.
 */
export function philox4x32(counter: ArrayLike<number>, key: ArrayLike<number>, out: Uint32Array | number[]): void {
  let c0 = counter[0]! >>> 0;
  let c1 = counter[1]! >>> 0;
  let c2 = counter[2]! >>> 0;
  let c3 = counter[3]! >>> 0;
  let k0 = key[0]! >>> 0;
  let k1 = key[1]! >>> 0;
  for (let round = 0; round < 10; round++) {
    if (round > 0) {
      k0 = (k0 + W0) >>> 0;
      k1 = (k1 + W1) >>> 0;
    }
    const high0 = mulHigh(M0, c0);
    const low0 = Math.imul(M0, c0) >>> 0;
    const high1 = mulHigh(M1, c2);
    const low1 = Math.imul(M1, c2) >>> 0;
    c0 = (high1 ^ c1 ^ k0) >>> 0;
    c1 = low1;
    c2 = (high0 ^ c3 ^ k1) >>> 0;
    c3 = low0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/** Splits a non-negative integer below 2^64 into [low, high] 32-bit words. */
function toWords(value: number | bigint, what: string): [number, number] {
  if (typeof value === "bigint") {
    if (value < 0n || value >= 1n << 64n) throw new TensorError(`${what} ${value} must be an integer in [0, 2^64)`);
    return [Number(value & 0xffffffffn), Number(value >> 32n)];
  }
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new TensorError(`${what} ${value} must be a non-negative safe integer (or a bigint below 2^64)`);
  }
  return [value % 0x100000000, Math.floor(value / 0x100000000)];
}

/** A generator's position, JSON-safe (all plain numbers), for checkpoints. */
export interface RngState {
  algorithm: "philox4x32-10";
  /** The seed as [low, high] 32-bit words. */
  key: [number, number];
  /** The stream as [low, high] 32-bit words. */
  stream: [number, number];
  /** Index of the next block as [low, high] 32-bit words. */
  counter: [number, number];
  /** Words of the current block already used (0..4; 4 = the block is spent). */
  position: number;
  /** The second Box–Muller value waiting for the next normal(), if any. */
  spareNormal: number | null;
}

function isWordPair(value: unknown): value is [number, number] {
  return Array.isArray(value) && value.length === 2 && value.every((w) => typeof w === "number" && Number.isInteger(w) && w >= 0 && w <= 0xffffffff);
}

const TWO_POW_32 = 0x100000000;
const TWO_POW_53 = 2 ** 53;

export class Rng {
  private readonly key = new Uint32Array(2);
  private readonly counter = new Uint32Array(4);
  private readonly block = new Uint32Array(4);
  private position = 4;
  private spareNormal: number | null = null;

  constructor(seed: number | bigint, stream: number | bigint = 0) {
    this.key.set(toWords(seed, "seed"));
    this.counter.set(toWords(stream, "stream"), 2);
  }

  /** The next random 32-bit unsigned integer. */
  nextUint32(): number {
    if (this.position === 4) {
      philox4x32(this.counter, this.key, this.block);
      // Advance the 64-bit block index held in counter words 0-1.
      this.counter[0] = this.counter[0]! + 1;
      if (this.counter[0] === 0) this.counter[1] = this.counter[1]! + 1;
      this.position = 0;
    }
    return this.block[this.position++]!;
  }

  /** A uniform number in [0, 1) with 53 random bits. */
  uniform(): number {
    const high = this.nextUint32() >>> 5; // 27 bits
    const low = this.nextUint32() >>> 6; // 26 bits
    return (high * 67108864 + low) / TWO_POW_53;
  }

  /** A standard normal number (mean 0, variance 1), Box–Muller. */
  normal(): number {
    if (this.spareNormal !== null) {
      const z = this.spareNormal;
      this.spareNormal = null;
      return z;
    }
    const u1 = 1 - this.uniform(); // (0, 1]: the log stays finite
    const u2 = this.uniform();
    const radius = Math.sqrt(-2 * Math.log(u1));
    const angle = 2 * Math.PI * u2;
    this.spareNormal = radius * Math.sin(angle);
    return radius * Math.cos(angle);
  }

  /** A uniform integer in [0, maxExclusive), without modulo bias; maxExclusive in [1, 2^53]. */
  int(maxExclusive: number): number {
    if (!Number.isInteger(maxExclusive) || maxExclusive < 1 || maxExclusive > TWO_POW_53) {
      throw new TensorError(`int(maxExclusive): ${maxExclusive} must be an integer in [1, 2^53]`);
    }
    if (maxExclusive <= TWO_POW_32) {
      const limit = TWO_POW_32 - (TWO_POW_32 % maxExclusive);
      for (;;) {
        const x = this.nextUint32();
        if (x < limit) return x % maxExclusive;
      }
    }
    const limit = TWO_POW_53 - (TWO_POW_53 % maxExclusive);
    for (;;) {
      const x = (this.nextUint32() >>> 11) * TWO_POW_32 + this.nextUint32(); // 53 bits
      if (x < limit) return x % maxExclusive;
    }
  }

  /** Fills `array` with uniform values in [low, high) (rounded to the array's precision, still below high). */
  fillUniform<A extends Float32Array | Float64Array>(array: A, low = 0, high = 1): A {
    if (!(Number.isFinite(low) && Number.isFinite(high) && low < high)) {
      throw new TensorError(`fillUniform: need finite low < high, got low=${low}, high=${high}`);
    }
    const single = array instanceof Float32Array;
    if (single && !(Math.fround(low) < Math.fround(high))) {
      throw new TensorError(`fillUniform: low=${low} and high=${high} are the same float32 value`);
    }
    const width = high - low;
    for (let i = 0; i < array.length; i++) {
      let v: number;
      // Rounding (to float64, or to float32) can land on `high`: draw again.
      do {
        v = low + width * this.uniform();
        if (single) v = Math.fround(v);
      } while (v >= high);
      array[i] = v;
    }
    return array;
  }

  /** Fills `array` with normal values of the given mean and standard deviation. */
  fillNormal<A extends Float32Array | Float64Array>(array: A, mean = 0, std = 1): A {
    if (!(Number.isFinite(mean) && Number.isFinite(std) && std >= 0)) {
      throw new TensorError(`fillNormal: need a finite mean and a finite std >= 0, got mean=${mean}, std=${std}`);
    }
    for (let i = 0; i < array.length; i++) array[i] = mean + std * this.normal();
    return array;
  }

  /** The generator's position as plain JSON-safe numbers. */
  getState(): RngState {
    return {
      algorithm: "philox4x32-10",
      key: [this.key[0]!, this.key[1]!],
      stream: [this.counter[2]!, this.counter[3]!],
      counter: [this.counter[0]!, this.counter[1]!],
      position: this.position,
      spareNormal: this.spareNormal,
    };
  }

  /** Continues from a state returned by getState (of this or any other Rng). */
  setState(state: RngState): this {
    const valid =
      state !== null &&
      typeof state === "object" &&
      state.algorithm === "philox4x32-10" &&
      isWordPair(state.key) &&
      isWordPair(state.stream) &&
      isWordPair(state.counter) &&
      Number.isInteger(state.position) &&
      state.position >= 0 &&
      state.position <= 4 &&
      (state.position === 4 || state.counter[0] !== 0 || state.counter[1] !== 0) &&
      (state.spareNormal === null || Number.isFinite(state.spareNormal));
    if (!valid) {
      const show = (_key: string, v: unknown) => (typeof v === "bigint" ? `${v}n` : typeof v === "number" && !Number.isFinite(v) ? String(v) : v);
      const shown = JSON.stringify(state, show);
      throw new TensorError(`setState: not a philox4x32-10 RNG state: ${shown}`);
    }
    this.key.set(state.key);
    this.counter.set(state.counter, 0);
    this.counter.set(state.stream, 2);
    this.position = 4;
    this.spareNormal = state.spareNormal;
    if (state.position < 4) {
      // Regenerate the current block: it is the one before the stored counter.
      const previous = new Uint32Array(this.counter);
      previous[0] = previous[0]! - 1;
      if (previous[0] === 0xffffffff) previous[1] = previous[1]! - 1;
      philox4x32(previous, this.key, this.block);
      this.position = state.position;
    }
    return this;
  }
}
