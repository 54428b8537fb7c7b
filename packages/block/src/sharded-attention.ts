/**
 * The contract shared by the sequence-parallel attention wrappers
 * (UlyssesAttention, AllGatherKVAttention): the LocalAttention contract on
 * each rank's sequence shard. q is [b, s_r, heads, D], k and v are
 * [b, s_r, kvHeads, D] where s_r is this rank's shard of the global sequence;
 * out is [b, s_r, heads, D]. Causal masking is global: the query at global
 * position i attends keys at global positions <= i.
 *
 * forward returns a context holding what backward needs (in the wrapper's own
 * layout); drop it and call forward again to recompute (activation
 * checkpointing). A wrapper instance serves one call at a time (it reuses its
 * exchange buffers); use one instance per concurrent stream.
 */
import type { AttentionGradients, AttentionOptions, LocalAttention } from "@ulysses/kernels";
import type { ProcessGroup } from "@ulysses/collectives";
import type { Tensor } from "@ulysses/tensors";
import { BlockError } from "./errors.js";
import type { SequenceOptions } from "./sequence-shards.js";

type F32 = Tensor<"float32">;

export interface ShardedAttentionOptions extends AttentionOptions, SequenceOptions {}

/** What forward saved for backward; opaque except for its size. */
export interface ShardedAttentionContext {
  /** Bytes of the tensors this context keeps alive. */
  readonly savedBytes: number;
  /** True once the wrapper's release() (or backward) gave its buffers back. */
  readonly released?: boolean;
}

/**
 * The local attention call a wrapper made in forward, kept for backward:
 * q, out [b, S, h, D], k, v [b, S', k, D], logSumExp [b, h, S] in the layout
 * the local kernel saw.
 */
export abstract class SavedLocalAttention implements ShardedAttentionContext {
  constructor(
    readonly options: ShardedAttentionOptions,
    readonly q: F32,
    readonly k: F32,
    readonly v: F32,
    readonly out: F32,
    readonly logSumExp: F32,
  ) {}

  /** Set by the wrapper's release(): the buffers may belong to someone else now. */
  released = false;

  get savedBytes(): number {
    return this.q.byteLength + this.k.byteLength + this.v.byteLength + this.out.byteLength + this.logSumExp.byteLength;
  }

  /** The local kernel's backward on the saved tensors. */
  localBackward(local: LocalAttention, dOut: F32): Promise<AttentionGradients> {
    return local.backward(this.q, this.k, this.v, this.out, dOut, this.logSumExp, { causal: this.options.causal, scale: this.options.scale });
  }
}

export interface ShardedAttentionForward<C extends ShardedAttentionContext = ShardedAttentionContext> {
  /** [b, s_r, heads, D] */
  out: F32;
  context: C;
}

export interface ShardedAttention<C extends ShardedAttentionContext = ShardedAttentionContext> {
  readonly name: string;
  readonly group: ProcessGroup;
  /** Throws a BlockError when heads/kvHeads cannot run on this group (called before any communication). */
  checkHeads(heads: number, kvHeads: number): void;
  forward(q: F32, k: F32, v: F32, options: ShardedAttentionOptions): Promise<ShardedAttentionForward<C>>;
  /** dOut [b, s_r, heads, D] -> dq [b, s_r, heads, D], dk and dv [b, s_r, kvHeads, D] (summed over every use). */
  backward(context: C, dOut: F32): Promise<AttentionGradients>;
  /**
   * Optional recycling: gives the context's buffers, and any tensors this
   * wrapper returned (out, dq, dk, dv), back for reuse by later calls. Neither
   * the context nor those tensors may be used afterwards. Tensors the wrapper
   * did not allocate are ignored; a second release of a context does nothing.
   */
  release(context: C, ...tensors: F32[]): void;
}

export interface ShardDims {
  batch: number;
  seq: number;
  heads: number;
  kvHeads: number;
  headDim: number;
}

/** Checks the local shard shapes of q, k, v and returns their dimensions. */
export function shardDims(q: F32, k: F32, v: F32, who: string): ShardDims {
  const ok4 = (t: F32) => t.rank === 4 && t.dtype === "float32";
  if (!ok4(q) || !ok4(k) || !ok4(v)) {
    throw new BlockError(`${who}: q, k, v must be float32 [batch, seq, heads, headDim]; got q ${q}, k ${k}, v ${v}`);
  }
  const [batch, seq, heads, headDim] = q.shape as unknown as [number, number, number, number];
  const [kb, ks, kvHeads, kd] = k.shape as unknown as [number, number, number, number];
  const same = kb === batch && ks === seq && kd === headDim && v.shape.every((d, i) => d === k.shape[i]);
  if (!same) throw new BlockError(`${who}: k ${k} and v ${v} do not match q ${q} (same batch, sequence shard and headDim; k and v equal)`);
  return { batch, seq, heads, kvHeads, headDim };
}

/** Checks that dOut has out's shape. */
export function checkGradShape(dOut: F32, expected: readonly number[], who: string): void {
  if (dOut.rank !== expected.length || dOut.shape.some((d, i) => d !== expected[i])) {
    throw new BlockError(`${who}: dOut ${dOut} does not match the forward output [${expected.join(", ")}]`);
  }
}

/** Marks a wrapper busy for the duration of `fn` (its exchange buffers are reused). */
export async function exclusive<T>(owner: { busy: boolean; readonly name: string }, fn: () => Promise<T>): Promise<T> {
  if (owner.busy) throw new BlockError(`${owner.name}: one call at a time per instance (its exchange buffers are reused); use one instance per concurrent stream`);
  owner.busy = true;
  try {
    return await fn();
  } finally {
    owner.busy = false;
  }
}
