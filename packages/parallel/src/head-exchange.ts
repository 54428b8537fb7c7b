/**
 * The four re-layouts around a Ulysses all-to-all, on flat float32 exchange
 * buffers (one all-to-all row = one head vector of D floats):
 *
 *   gatherHeads   [b, s, Hx, D] (chosen heads)  -> buffer [b, s, h, D]
 *   scatterHeads  buffer [b, s, h, D]           -> [b, s, Hx, D] (chosen heads; set or add)
 *   (both optionally on a window of tokens of each batch row: an exchange in chunks)
 *   readSeqBlock  [b, N, h, D] (tokens [t, t+n)) -> buffer [b, n, h, D]
 *   writeSeqBlock buffer [b, n, h, D]           -> [b, N, h, D] (tokens [t, t+n))
 *
 * A block sent from rank j to rank r is [b, s_j, h_r, D]: token-major, so the
 * sequence side moves whole runs of n*h*D floats per batch row and the head
 * side moves runs of consecutive heads. Communication is left to the caller.
 */
import type { Tensor } from "@ulysses/tensors";
import { ParallelError } from "./errors.js";

type F32 = Tensor<"float32">;

/** Copies n floats; short runs by a plain loop (cheaper than creating a subarray view). */
function copyRun(src: Float32Array, from: number, dst: Float32Array, to: number, n: number): void {
  if (n < 64) {
    for (let e = 0; e < n; e++) dst[to + e] = src[from + e]!;
  } else {
    dst.set(src.subarray(from, from + n), to);
  }
}

/** Consecutive ascending runs of a head list: [3, 4, 5, 5] -> [[3, 3], [5, 1]] as [start, length]. */
function headRuns(heads: readonly number[]): [number, number][] {
  const runs: [number, number][] = [];
  for (const h of heads) {
    const last = runs[runs.length - 1];
    if (last !== undefined && last[0] + last[1] === h) last[1]++;
    else runs.push([h, 1]);
  }
  return runs;
}

function dims4(t: F32, what: string): [number, number, number, number] {
  if (t.rank !== 4) throw new ParallelError(`${what}: expected a [batch, seq, heads, headDim] tensor, got ${t}`);
  return t.shape as unknown as [number, number, number, number];
}

/** Tokens [first, first + count) of a sequence axis (default: all of it). */
export interface TokenWindow {
  readonly first: number;
  readonly count: number;
}

/** [first, end) of `window` in a sequence of s tokens (default: all of it). */
function windowRange(s: number, window: TokenWindow | undefined, what: string): [number, number] {
  const first = window?.first ?? 0;
  const end = first + (window?.count ?? s);
  if (!Number.isInteger(first) || first < 0 || end < first || end > s)
    throw new ParallelError(`${what}: token window [${first}, ${end}) is outside a sequence of ${s}`);
  return [first, end];
}

/** Writes heads `heads` of src [b, s, Hx, D] (tokens `window` of each batch row) into dst[offset..] as [b, window, heads.length, D]; returns the end offset. */
export function gatherHeads(src: F32, heads: readonly number[], dst: Float32Array, offset: number, window?: TokenWindow): number {
  const [b, s, hx, d] = dims4(src, "gatherHeads");
  const [first, end] = windowRange(s, window, "gatherHeads");
  const runs = headRuns(heads);
  const data = src.data;
  let o = offset;
  // [b, s, Hx, D] -> [b, s, h, D]: per token, copy each run of consecutive heads.
  for (let i = 0; i < b; i++) {
    for (let t = i * s + first; t < i * s + end; t++) {
      const base = t * hx * d;
      for (const [start, length] of runs) {
        copyRun(data, base + start * d, dst, o, length * d);
        o += length * d;
      }
    }
  }
  return o;
}

/** Reads [b, window, heads.length, D] from src[offset..] into heads `heads` of dst [b, s, Hx, D] (tokens `window` of each batch row); adds when `accumulate`. */
export function scatterHeads(src: Float32Array, offset: number, dst: F32, heads: readonly number[], accumulate: boolean, window?: TokenWindow): number {
  const [b, s, hx, d] = dims4(dst, "scatterHeads");
  const [first, end] = windowRange(s, window, "scatterHeads");
  const runs = headRuns(heads);
  const data = dst.data;
  let o = offset;
  // [b, s, h, D] -> [b, s, Hx, D]: per token, each run lands on consecutive heads.
  for (let i = 0; i < b; i++) {
    for (let t = i * s + first; t < i * s + end; t++) {
      const base = t * hx * d;
      for (const [start, length] of runs) {
        const to = base + start * d;
        const n = length * d;
        if (accumulate) {
          for (let e = 0; e < n; e++) data[to + e] += src[o + e]!;
        } else {
          copyRun(src, o, data, to, n);
        }
        o += n;
      }
    }
  }
  return o;
}

/** Copies tokens [start, start+length) of src [b, N, h, D] into dst[offset..] as [b, length, h, D]; returns the end offset. */
export function readSeqBlock(src: F32, start: number, length: number, dst: Float32Array, offset: number): number {
  const [b, n, h, d] = dims4(src, "readSeqBlock");
  const run = length * h * d;
  let o = offset;
  // [b, N, h, D] -> [b, length, h, D]: one contiguous run per batch row.
  for (let i = 0; i < b; i++) {
    const from = (i * n + start) * h * d;
    dst.set(src.data.subarray(from, from + run), o);
    o += run;
  }
  return o;
}

/** Copies src[offset..] laid out [b, length, h, D] into tokens [start, start+length) of dst [b, N, h, D]. */
export function writeSeqBlock(src: Float32Array, offset: number, dst: F32, start: number, length: number): number {
  const [b, n, h, d] = dims4(dst, "writeSeqBlock");
  const run = length * h * d;
  let o = offset;
  // [b, length, h, D] -> [b, N, h, D] at tokens [start, start+length).
  for (let i = 0; i < b; i++) {
    dst.data.set(src.subarray(o, o + run), (i * n + start) * h * d);
    o += run;
  }
  return o;
}

/**
 * Reusable scratch memory for exchange buffers: `get(slot, length)` returns a
 * Float32Array of exactly `length` floats, reallocating only when the slot's
 * buffer is too small. Callers must finish with a buffer before asking for
 * the same slot again.
 */
export class ScratchBuffers {
  private readonly buffers = new Map<string, Float32Array>();

  get(slot: string, length: number): Float32Array {
    let buffer = this.buffers.get(slot);
    if (buffer === undefined || buffer.length < length) {
      buffer = new Float32Array(length);
      this.buffers.set(slot, buffer);
    }
    return buffer.subarray(0, length);
  }

  /** Total bytes held (for memory reports). */
  get bytes(): number {
    let total = 0;
    for (const b of this.buffers.values()) total += b.byteLength;
    return total;
  }
}
