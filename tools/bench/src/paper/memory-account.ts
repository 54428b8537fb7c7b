/**
 * The per-rank memory account of `bench:paper`'s maximum-sequence search:
 * wrappers that record the byte sizes of the float32 tensors a rank holds
 * while one TransformerBlock step runs, without changing what runs.
 *
 * - `RecordingGroup` (a Proxy over the ProcessGroup): the largest input and
 *   output buffer of the attention collectives (all-to-all, all-gather,
 *   reduce-scatter): the wrappers' reused exchange buffers.
 * - `RecordingLocalAttention`: the local kernel's backward inputs and outputs
 *   (dOut, dq, dk, dv in the kernel's layout: full sequence for Ulysses, the
 *   gathered keys for the baseline).
 * - `RecordingShardedAttention`: the wrapper's returned dq, dk, dv (the
 *   rank's local layout).
 *
 * The peak is taken at the end of the attention backward, where everything
 * below is alive at once: the forward's saved context (`savedBytes`, which
 * holds the attention context: q, k, v, out and log-sum-exp in the kernel's
 * layout), the exchange buffers, the kernel's backward I/O, the wrapper's
 * gradients, dy, the weights and their gradients. ONNX Runtime's internal
 * per-run intermediates (O(128 · keys) floats per session run) and V8 objects
 * are not counted.
 */
import type { ProcessGroup } from "@ulysses/collectives";
import type { AttentionGradients, LocalAttention, AttentionOptions } from "@ulysses/kernels";
import type { BlockAttentionContext } from "@ulysses/block";
import type { ShardedAttention, ShardedAttentionOptions } from "@ulysses/parallel";
import type { Tensor } from "@ulysses/tensors";

type F32 = Tensor<"float32">;

const bytesOf = (x: unknown): number => (typeof x === "object" && x !== null && "byteLength" in x ? Number((x as { byteLength: number }).byteLength) : 0);

export interface ExchangeRecord {
  maxInputBytes: number;
  maxOutputBytes: number;
}

/** A ProcessGroup that records the largest attention-collective buffers (the group itself does the work). */
export function recordingGroup(group: ProcessGroup, record: ExchangeRecord): ProcessGroup {
  const watched = new Set(["allToAll", "allGather", "reduceScatter"]);
  return new Proxy(group, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target) as unknown;
      if (typeof value !== "function") return value;
      if (typeof prop !== "string" || !watched.has(prop)) return (value as (...a: unknown[]) => unknown).bind(target);
      return async (input: unknown, options?: { output?: unknown }) => {
        const out = await (value as (i: unknown, o: unknown) => Promise<unknown>).call(target, input, options);
        record.maxInputBytes = Math.max(record.maxInputBytes, bytesOf(input));
        record.maxOutputBytes = Math.max(record.maxOutputBytes, bytesOf(options?.output ?? out));
        return out;
      };
    },
  });
}

/** Records the bytes of the local kernel's backward inputs (dOut) and outputs (dq, dk, dv), and the time spent in the kernel. */
export class RecordingLocalAttention implements LocalAttention {
  readonly name: string;
  backwardIoBytes = 0;
  /** Wall time inside the kernel's forward and backward since the last reset, ms. */
  kernelMs = 0;

  constructor(readonly inner: LocalAttention) {
    this.name = inner.name;
  }

  async forward(q: F32, k: F32, v: F32, options: AttentionOptions) {
    const t0 = performance.now();
    const r = await this.inner.forward(q, k, v, options);
    this.kernelMs += performance.now() - t0;
    return r;
  }

  async backward(q: F32, k: F32, v: F32, out: F32, dOut: F32, logSumExp: F32, options: AttentionOptions): Promise<AttentionGradients> {
    const t0 = performance.now();
    const g = await this.inner.backward(q, k, v, out, dOut, logSumExp, options);
    this.kernelMs += performance.now() - t0;
    this.backwardIoBytes = Math.max(this.backwardIoBytes, dOut.byteLength + g.dq.byteLength + g.dk.byteLength + g.dv.byteLength);
    return g;
  }

  /** The inner kernel belongs to the caller, which releases it. */
  release(): void {}
}

/** Records the bytes of the wrapper's returned gradients; everything else is delegated. */
export class RecordingShardedAttention implements ShardedAttention {
  readonly name: string;
  readonly group: ProcessGroup;
  gradientBytes = 0;

  constructor(readonly inner: ShardedAttention) {
    this.name = inner.name;
    this.group = inner.group;
  }

  checkHeads(heads: number, kvHeads: number): void {
    this.inner.checkHeads(heads, kvHeads);
  }

  forward(q: F32, k: F32, v: F32, options: ShardedAttentionOptions) {
    return this.inner.forward(q, k, v, options);
  }

  async backward(context: BlockAttentionContext, dOut: F32): Promise<AttentionGradients> {
    const g = await this.inner.backward(context, dOut);
    this.gradientBytes = Math.max(this.gradientBytes, g.dq.byteLength + g.dk.byteLength + g.dv.byteLength);
    return g;
  }

  release(context: BlockAttentionContext, ...tensors: F32[]): void {
    this.inner.release(context, ...tensors);
  }
}

export interface MemoryAccount {
  savedBytes: number;
  exchangeBytes: number;
  kernelBackwardBytes: number;
  attentionGradientBytes: number;
  /** dy [b, s_r, hidden]. */
  upstreamGradientBytes: number;
  /** Weights and their gradients (replicated on every rank). */
  weightBytes: number;
  peakBytes: number;
}

export function memoryAccount(parts: Omit<MemoryAccount, "peakBytes">): MemoryAccount {
  const peakBytes =
    parts.savedBytes + parts.exchangeBytes + parts.kernelBackwardBytes + parts.attentionGradientBytes + parts.upstreamGradientBytes + parts.weightBytes;
  return { ...parts, peakBytes };
}
