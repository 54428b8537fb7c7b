/**
 * Arrays on fresh ArrayBuffers that are not zero-filled (Buffer.allocUnsafeSlow:
 * not from Node's shared pool, so each has its own buffer at offset 0), for
 * outputs a kernel writes whole (ONNX Runtime's in @ulysses/native-ops's
 * NativeSessionCache, its native ops' in FusedOps): zero-filling a
 * multi-megabyte output is one more pass over memory that the kernel then
 * overwrites.
 *
 * BufferPool hands such arrays out again once their user gives them back:
 * the op outputs that BlockOps.release returns (a step that allocated and
 * dropped a few hundred MiB of outputs per rank made V8 collect every 32 MiB
 * of new ArrayBuffers, and run a full collection about once a step), and
 * the exchange and ring buffers of @ulysses/parallel (TensorPool). Fresh
 * pages cost ~2.2 us per 4 KiB on this project's VMs, far more under load;
 * reused warm memory costs nothing.
 */

/** An array of `count` elements whose values are whatever the allocator left there. */
export function unfilled(dtype: "float32" | "int32", count: number): Float32Array | Int32Array {
  if (count === 0) return dtype === "float32" ? new Float32Array(0) : new Int32Array(0);
  const buffer = Buffer.allocUnsafeSlow(count * 4).buffer;
  return dtype === "float32" ? new Float32Array(buffer, 0, count) : new Int32Array(buffer, 0, count);
}

export interface BufferPoolOptions {
  /** Bytes of given-back buffers kept for reuse at most (0: none, every array is fresh; default: no limit but perSize). */
  maxBytes?: number;
  /** Buffers of one byte length kept at most (default 32). */
  perSize?: number;
  /** Fill each given-back buffer with NaN, so a read after release shows (for tests). */
  poison?: boolean;
}

/**
 * Float32 and int32 buffers handed back for reuse. Only buffers this pool handed out
 * are taken back (whole: a view of part of one, or an array of the caller's,
 * is ignored), each at most once until handed out again; the pool keeps at
 * most maxBytes, and the rest is left to the garbage collector.
 */
export class BufferPool {
  private readonly maxBytes: number;
  private readonly perSize: number;
  private readonly poison: boolean;
  /** Free buffers by byte length. */
  private readonly free = new Map<number, ArrayBuffer[]>();
  /** Buffers handed out and not given back: the ones give() accepts. */
  private readonly lent = new WeakSet<ArrayBuffer>();
  private keptBytes = 0;
  /** Arrays served from given-back buffers, for diagnostics and tests. */
  reused = 0;

  constructor(options: BufferPoolOptions = {}) {
    const maxBytes = options.maxBytes ?? Number.MAX_SAFE_INTEGER;
    if (!Number.isSafeInteger(maxBytes) || maxBytes < 0) throw new RangeError(`BufferPool: maxBytes must be a non-negative integer, got ${maxBytes}`);
    this.maxBytes = maxBytes;
    this.perSize = options.perSize ?? 32;
    this.poison = options.poison ?? false;
  }

  /** Bytes of free buffers held now. */
  get bytes(): number {
    return this.keptBytes;
  }

  /** An array of `count` elements, not zero-filled: a given-back buffer of that size when there is one. */
  take(dtype: "float32" | "int32", count: number): Float32Array | Int32Array {
    if (count === 0) return unfilled(dtype, 0);
    const bytes = count * 4;
    const buffer = this.free.get(bytes)?.pop();
    let array: Float32Array | Int32Array;
    if (buffer !== undefined) {
      this.keptBytes -= bytes;
      this.reused++;
      array = dtype === "float32" ? new Float32Array(buffer, 0, count) : new Int32Array(buffer, 0, count);
    } else {
      array = unfilled(dtype, count);
    }
    if (this.maxBytes > 0) this.lent.add(array.buffer as ArrayBuffer);
    return array;
  }

  /** Gives `array`'s buffer back: the caller reads and writes it no more. */
  give(array: Float32Array | Int32Array): void {
    const buffer = array.buffer as ArrayBuffer;
    if (!this.lent.has(buffer) || array.byteOffset !== 0 || array.byteLength !== buffer.byteLength) return;
    this.lent.delete(buffer);
    const bytes = buffer.byteLength;
    const list = this.free.get(bytes) ?? [];
    if (list.length >= this.perSize || this.keptBytes + bytes > this.maxBytes) return;
    if (this.poison) new Float32Array(buffer).fill(Number.NaN);
    list.push(buffer);
    this.free.set(bytes, list);
    this.keptBytes += bytes;
  }

  /** Drops every free buffer. */
  clear(): void {
    this.free.clear();
    this.keptBytes = 0;
  }
}
