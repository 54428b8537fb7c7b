/**
 * Deterministic data and plain reference helpers for the conformance checks.
 * Every rank can compute every other rank's input (a formula of rank and
 * index), so each rank checks its own output against a reference it computes
 * alone, with code independent of the backends (no planOp, no reduceInto).
 */
import { Tensor, type DType } from "@ulysses/tensors";
import type { ProcessGroup } from "../types.js";

export const DATA_DTYPES: readonly DType[] = ["float32", "float64", "int32", "int64", "float16", "bfloat16", "uint8"];
export const REDUCE_DTYPES: readonly DType[] = ["float32", "float64", "int32", "int64", "float16", "bfloat16"];

/** A small integer (exact in every dtype, sums of 8 of them too): rank r, element i, stream s. */
export function value(r: number, i: number, s = 0): number {
  return ((r * 37 + i * 11 + s * 5) % 61) - 30;
}

/** float16 bits of a small integer (|n| < 2048), written independently of the backends. */
function f16Bits(n: number): number {
  if (n === 0) return 0;
  const sign = n < 0 ? 0x8000 : 0;
  const a = Math.abs(n);
  const e = Math.floor(Math.log2(a));
  return sign | ((e + 15) << 10) | ((a / 2 ** e - 1) * 1024);
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
/** bfloat16 bits of a small integer (|n| <= 256): the top half of its float32 bits. */
function bf16Bits(n: number): number {
  f32[0] = n;
  return u32[0]! >>> 16;
}

/** The stored element for logical value `v` (16-bit floats as bits, int64 as bigint). */
export function encode(dtype: DType, v: number): number | bigint {
  switch (dtype) {
    case "float16":
      return f16Bits(v);
    case "bfloat16":
      return bf16Bits(v);
    case "int64":
      return BigInt(v);
    case "uint8":
      return ((v % 256) + 256) % 256;
    default:
      return v;
  }
}

/** A tensor whose element i holds `encode(dtype, f(i))`. */
export function fill(dtype: DType, shape: readonly number[], f: (i: number) => number): Tensor {
  const t = new Tensor(dtype, shape);
  const data = t.data as unknown as { [i: number]: number | bigint; length: number };
  for (let i = 0; i < data.length; i++) data[i] = encode(dtype, f(i));
  return t;
}

/** Throws naming the first differing element unless `actual` holds exactly `expected` (logical values). */
export function expectData(what: string, actual: Tensor, dtype: DType, shape: readonly number[], expected: readonly number[]): void {
  if (actual.dtype !== dtype) throw new Error(`${what}: dtype ${actual.dtype}, expected ${dtype}`);
  if (actual.shape.length !== shape.length || actual.shape.some((d, k) => d !== shape[k])) {
    throw new Error(`${what}: shape [${actual.shape.join(", ")}], expected [${shape.join(", ")}]`);
  }
  const data = actual.data as unknown as ArrayLike<number | bigint>;
  if (data.length !== expected.length) throw new Error(`${what}: ${data.length} elements, expected ${expected.length}`);
  for (let i = 0; i < expected.length; i++) {
    const want = encode(dtype, expected[i]!);
    if (data[i] !== want) throw new Error(`${what}: element ${i} is ${String(data[i])}, expected ${String(want)} (value ${expected[i]})`);
  }
}

export function expectTrue(condition: boolean, message: string): void {
  if (!condition) throw new Error(message);
}

/** Runs `fn` and returns the message it rejects with (throws if it resolves). */
export async function rejection(what: string, fn: () => Promise<unknown>): Promise<string> {
  try {
    await fn();
  } catch (e) {
    return (e as Error).message;
  }
  throw new Error(`${what}: resolved, expected a rejection`);
}

/** Checks, with collectives, that every rank of `group` holds the same `text`. */
export async function expectSameOnAllRanks(group: ProcessGroup, what: string, text: string): Promise<void> {
  const bytes = new TextEncoder().encode(text);
  const lengths = await group.allGather(Int32Array.from([bytes.length]));
  const sizes = Array.from(lengths.data as Int32Array);
  const all = await group.allGather(bytes, { sizes });
  const decoded = sizes.map((n, j) =>
    new TextDecoder().decode(
      (all.data as Uint8Array).subarray(
        sizes.slice(0, j).reduce((a, b) => a + b, 0),
        sizes.slice(0, j).reduce((a, b) => a + b, 0) + n,
      ),
    ),
  );
  const other = decoded.findIndex((t) => t !== text);
  if (other >= 0) throw new Error(`${what}: rank ${group.rank} got "${text}" but rank ${other} got "${decoded[other]}"`);
}

/** Sum of a list. */
export const sum = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0);
/** Ranks 0..P-1. */
export const ranksOf = (size: number) => Array.from({ length: size }, (_, r) => r);
