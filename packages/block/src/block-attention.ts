/**
 * The attention a TransformerBlock calls, forward and backward: q is
 * [b, s, heads, D], k and v are [b, s, kvHeads, D], out is [b, s, heads, D],
 * with the LocalAttention contract of @ulysses/kernels (grouped-query heads,
 * causal masking). On one device it is `LocalBlockAttention`, which runs a
 * LocalAttention kernel and keeps what its backward needs. Sequence
 * parallelism (@ulysses/parallel) swaps in a wrapper with the same contract
 * whose s is this rank's shard of a longer sequence: the block never knows.
 *
 * forward returns a context holding what backward needs; drop it and call
 * forward again to recompute (activation checkpointing). An instance serves
 * one call at a time when it reuses buffers (`exclusive`).
 */
import type { AttentionGradients, AttentionOptions, LocalAttention } from "@ulysses/kernels";
import type { Tensor } from "@ulysses/tensors";
import { BlockError } from "./errors.js";

type F32 = Tensor<"float32">;

/** What forward saved for backward; opaque except for its size. */
export interface BlockAttentionContext {
  /** Bytes of the tensors this context keeps alive. */
  readonly savedBytes: number;
  /** True once release() (or backward) gave its buffers back. */
  readonly released?: boolean;
  /**
   * Whether this context keeps `tensor`'s memory for backward. The block
   * gives forward's q, k and v back to its ops (BlockOps.release) when it
   * returns false, e.g. for a sharded attention that saved exchanged copies.
   * Absent: the block assumes it does.
   */
  keeps?(tensor: Tensor): boolean;
}

export interface BlockAttentionForward<C extends BlockAttentionContext = BlockAttentionContext> {
  /** [b, s, heads, D] */
  out: F32;
  context: C;
}

/** The options of a block's attention call: the kernel's, and the forward's `attentionRun` (opaque to the block). */
export interface BlockAttentionOptions extends AttentionOptions {
  run?: unknown;
}

export interface BlockAttention<C extends BlockAttentionContext = BlockAttentionContext> {
  readonly name: string;
  forward(q: F32, k: F32, v: F32, options: BlockAttentionOptions): Promise<BlockAttentionForward<C>>;
  /** dOut [b, s, heads, D] -> dq [b, s, heads, D], dk and dv [b, s, kvHeads, D]. */
  backward(context: C, dOut: F32): Promise<AttentionGradients>;
  /**
   * Gives the context's buffers, and tensors this attention returned (out, dq,
   * dk, dv), back for reuse. Neither may be used afterwards. Tensors it did not
   * allocate are ignored; a second release of a context does nothing.
   */
  release(context: C, ...tensors: F32[]): void;
  /**
   * Optional, with `restore`: lets go of a context's q, k, v (and their
   * exchanged copies) and its own copy of the output, keeping the kernel's
   * statistics: with the forward's `out` (which the caller keeps) and q, k,
   * v made again, `restore` rebuilds the context without running the
   * kernel's forward again. The context is released.
   */
  keepOutput?(context: C): KeptAttention;
  /** The context of `keepOutput`'s forward again, from q, k, v made again and the forward's `out`: no kernel runs. */
  restore?(kept: KeptAttention, q: F32, k: F32, v: F32, out: F32): Promise<C>;
}

/** What `BlockAttention.keepOutput` keeps of a context: opaque except for its size. */
export interface KeptAttention {
  /** Bytes of the tensors it keeps alive. */
  readonly savedBytes: number;
}

/** A SavedLocalAttention's log-sum-exp, kernel options and layout without its q, k, v and out (`SavedLocalAttention.keepStatistics`). */
export class KeptLocalStatistics<L = null> implements KeptAttention {
  constructor(
    readonly owner: object,
    readonly layout: L,
    readonly options: AttentionOptions,
    readonly logSumExp: F32,
  ) {}

  get savedBytes(): number {
    return this.logSumExp.byteLength;
  }

  /** `kept` as the statistics `owner`'s keepOutput returned, or a BlockError naming `who`. */
  static ownedBy<L>(kept: KeptAttention, owner: object, who: string): KeptLocalStatistics<L> {
    if (!(kept instanceof KeptLocalStatistics) || kept.owner !== owner) throw new BlockError(`${who}: restore needs what its own keepOutput returned`);
    return kept as KeptLocalStatistics<L>;
  }

  /**
   * The context again, q, k, v and out in the layout the local kernel saw
   * (q and out each [b, tokens, heads, D] of the kept statistics: a
   * BlockError otherwise).
   */
  restored(q: F32, k: F32, v: F32, out: F32): SavedLocalAttention<L> {
    const [b, h, n] = this.logSumExp.shape as unknown as [number, number, number];
    const expected = [b, n, h, q.shape[3]];
    const who = (this.owner as { name?: string }).name ?? "attention";
    if (q.rank !== 4 || q.shape.some((d, i) => d !== expected[i]))
      throw new BlockError(`${who}: restore's q ${q} does not match the kept statistics of [${b}, ${h}, ${n}] (batch, heads, tokens)`);
    checkGradShape(out, q.shape, who);
    return new SavedLocalAttention(this.owner, this.layout, this.options, q, k, v, out, this.logSumExp);
  }
}

/**
 * The local attention call made in forward, kept for backward: q, out
 * [b, S, h, D], k, v [b, S', k, D], logSumExp [b, h, S] in the layout the
 * local kernel saw; `owner` is the attention that made it, `layout` whatever
 * else that attention's backward needs (a sharded one: its routing and shards).
 */
export class SavedLocalAttention<L = null> implements BlockAttentionContext {
  constructor(
    readonly owner: object,
    readonly layout: L,
    /** The options of the local kernel's call (its backward gets the same). */
    readonly options: AttentionOptions,
    readonly q: F32,
    readonly k: F32,
    readonly v: F32,
    readonly out: F32,
    readonly logSumExp: F32,
  ) {}

  /** Set by release(): the buffers may belong to someone else now. */
  released = false;

  get savedBytes(): number {
    return this.q.byteLength + this.k.byteLength + this.v.byteLength + this.out.byteLength + this.logSumExp.byteLength;
  }

  /** Whether `tensor` shares memory with one of the five saved tensors (`layout` must hold none of a caller's tensors). */
  keeps(tensor: Tensor): boolean {
    const buffer = tensor.data.buffer;
    return [this.q, this.k, this.v, this.out, this.logSumExp].some((t) => t.data.buffer === buffer);
  }

  /** Its statistics without q, k, v and out (BlockAttention.keepOutput, which releases the context first). */
  keepStatistics(): KeptLocalStatistics<L> {
    return new KeptLocalStatistics(this.owner, this.layout, this.options, this.logSumExp);
  }

  /** The local kernel's backward on the saved tensors. */
  localBackward(local: LocalAttention, dOut: F32): Promise<AttentionGradients> {
    return local.backward(this.q, this.k, this.v, this.out, dOut, this.logSumExp, this.options);
  }
}

/** One-device attention: a LocalAttention kernel on the whole sequence. */
export class LocalBlockAttention implements BlockAttention<SavedLocalAttention> {
  readonly name: string;

  constructor(readonly local: LocalAttention) {
    this.name = local.name;
  }

  async forward(q: F32, k: F32, v: F32, options: BlockAttentionOptions): Promise<BlockAttentionForward<SavedLocalAttention>> {
    // nothing of ours is in flight around the kernel (its backward reuses these options): it may run on this thread
    const { run: _run, ...kernelOptions } = options;
    const localOptions: AttentionOptions = { ...kernelOptions, onCallerThread: options.onCallerThread ?? true };
    const { out, logSumExp } = await this.local.forward(q, k, v, localOptions);
    return { out, context: new SavedLocalAttention(this, null, localOptions, q, k, v, out, logSumExp) };
  }

  async backward(context: SavedLocalAttention, dOut: F32): Promise<AttentionGradients> {
    checkOwnContext(this, context, this.name, "backward");
    checkGradShape(dOut, context.out.shape, this.name);
    return context.localBackward(this.local, dOut);
  }

  release(context: SavedLocalAttention): void {
    if (context instanceof SavedLocalAttention && context.owner === this) context.released = true;
  }

  keepOutput(context: SavedLocalAttention): KeptLocalStatistics {
    checkOwnContext(this, context, this.name, "keepOutput");
    this.release(context);
    return context.keepStatistics();
  }

  async restore(kept: KeptAttention, q: F32, k: F32, v: F32, out: F32): Promise<SavedLocalAttention> {
    return KeptLocalStatistics.ownedBy<null>(kept, this, this.name).restored(q, k, v, out);
  }
}

/**
 * Throws unless `context` is an unreleased SavedLocalAttention of `owner`:
 * "`who`: `call` needs the (unreleased) context its own forward returned",
 * a BlockError unless `error` makes another.
 */
export function checkOwnContext(
  owner: object,
  context: unknown,
  who: string,
  call: "backward" | "keepOutput",
  error: (message: string) => Error = (message) => new BlockError(message),
): asserts context is SavedLocalAttention<unknown> {
  if (!(context instanceof SavedLocalAttention) || context.owner !== owner || context.released)
    throw error(`${who}: ${call} needs the (unreleased) context its own forward returned`);
}

/** Checks that dOut has out's shape. */
export function checkGradShape(dOut: F32, expected: readonly number[], who: string): void {
  if (dOut.rank !== expected.length || dOut.shape.some((d, i) => d !== expected[i])) {
    throw new BlockError(`${who}: dOut ${dOut} does not match the forward output [${expected.join(", ")}]`);
  }
}

/** Marks an attention busy for the duration of `fn` (its exchange buffers are reused). */
export async function exclusive<T>(owner: { busy: boolean; readonly name: string }, fn: () => Promise<T>): Promise<T> {
  if (owner.busy)
    throw new BlockError(`${owner.name}: one call at a time per instance (its exchange buffers are reused); use one instance per concurrent stream`);
  owner.busy = true;
  try {
    return await fn();
  } finally {
    owner.busy = false;
  }
}
