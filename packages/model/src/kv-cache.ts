/**
 * Decoding with a key-value cache, forward only. `KvCacheAttention` is a
 * BlockAttention (the seam every block calls, so whatever the block does to
 * q and k before it, RoPE at the positions the block was given included,
 * applies unchanged): each forward appends this call's k and v
 * [b, s, kvHeads, D] to its layer's cache and attends q over every cached key,
 * causal within the new tokens (the LocalAttention contract's bottom-right
 * alignment: new token i sees cached keys and new keys up to i).
 *
 * `GptDecoder` gives every block of a Gpt its own KvCacheAttention, then
 * `append(tokens)` runs them at position = the cache's length and returns
 * the last token's logits: a prompt in one call (prefill, the LocalAttention
 * kernel), then one token per call, whose cost is one row of every matmul
 * and O(n) attention (computed here, see oneQuery).
 */
import type { BlockAttention, BlockAttentionContext, BlockAttentionForward, BlockAttentionOptions } from "@ulysses/block";
import type { AttentionGradients, LocalAttention } from "@ulysses/kernels";
import { Tensor } from "@ulysses/tensors";
import { ModelError } from "./errors.js";
import type { Gpt } from "./gpt.js";

type F32 = Tensor<"float32">;

/** A KvCacheAttention's forward keeps nothing for backward (there is none) and none of the caller's tensors. */
class KvCacheContext implements BlockAttentionContext {
  readonly savedBytes = 0;
  released = false;
  keeps(): boolean {
    return false;
  }
}

/** One layer's cache: keys and values of every token seen so far, [b, capacity, kvHeads, D] each. */
export class KvCacheAttention implements BlockAttention<KvCacheContext> {
  readonly name: string;
  private keys = new Float32Array(0);
  private values = new Float32Array(0);
  private capacity = 0;
  private shape: { batch: number; kvHeads: number; headDim: number } | null = null;
  /** Tokens cached. */
  length = 0;

  constructor(
    readonly local: LocalAttention,
    /** The most tokens the cache holds (the model's maxSeq). */
    readonly maxLength: number,
  ) {
    this.name = `KvCache(${local.name})`;
  }

  /** Empties the cache (its memory goes too). */
  reset(): void {
    this.keys = new Float32Array(0);
    this.values = new Float32Array(0);
    this.capacity = 0;
    this.shape = null;
    this.length = 0;
  }

  async forward(q: F32, k: F32, v: F32, options: BlockAttentionOptions): Promise<BlockAttentionForward<KvCacheContext>> {
    if (options.documents !== undefined) throw new ModelError(`${this.name}: packed documents are not decoded with a cache`);
    if (options.run !== undefined) throw new ModelError(`${this.name}: a sharded attention run cannot be decoded with a one-device cache`);
    if (!options.causal) throw new ModelError(`${this.name}: decoding needs causal attention`);
    if (k.rank !== 4 || v.rank !== 4 || k.shape.some((d, i) => d !== v.shape[i]))
      throw new ModelError(`${this.name}: k ${k} and v ${v} must both be [batch, seq, kvHeads, headDim]`);
    const [batch, s, kvHeads, headDim] = k.shape as [number, number, number, number];
    if (this.shape === null) this.shape = { batch, kvHeads, headDim };
    else if (this.shape.batch !== batch || this.shape.kvHeads !== kvHeads || this.shape.headDim !== headDim)
      throw new ModelError(
        `${this.name}: k ${k} does not continue the cached [${this.shape.batch}, ${this.length}, ${this.shape.kvHeads}, ${this.shape.headDim}]`,
      );
    const total = this.length + s;
    if (total > this.maxLength) throw new ModelError(`${this.name}: ${this.length} cached + ${s} new tokens exceed the ${this.maxLength} the cache holds`);
    const row = kvHeads * headDim;
    if (total > this.capacity) this.grow(Math.min(this.maxLength, Math.max(total, 2 * this.capacity, 16)), row, batch);
    for (let b = 0; b < batch; b++) {
      // [b, s, kvHeads, D] rows -> the cache's [b, capacity, kvHeads, D] at tokens [length, total)
      const from = b * s * row;
      const to = (b * this.capacity + this.length) * row;
      this.keys.set(k.data.subarray(from, from + s * row), to);
      this.values.set(v.data.subarray(from, from + s * row), to);
    }
    this.length = total;
    if (s === 1) return { out: this.oneQuery(q, options.scale), context: new KvCacheContext() };
    const { out } = await this.local.forward(q, this.cached(this.keys, row, batch), this.cached(this.values, row, batch), {
      causal: true,
      onCallerThread: true,
      ...(options.scale === undefined ? {} : { scale: options.scale }),
    });
    return { out, context: new KvCacheContext() };
  }

  /**
   * One new token, q [b, 1, heads, D], over every cached key, here: O(length)
   * per head, and no kernel whose shape changes with every token (kernels
   * built per shape would build a new one per step).
   */
  private oneQuery(q: F32, scale?: number): F32 {
    const { batch, kvHeads, headDim: d } = this.shape!;
    if (q.rank !== 4 || q.shape[0] !== batch || q.shape[1] !== 1 || q.shape[3] !== d || q.shape[2]! % kvHeads !== 0)
      throw new ModelError(`${this.name}: q ${q} must be [${batch}, 1, a multiple of ${kvHeads}, ${d}]`);
    const heads = q.shape[2]!;
    const group = heads / kvHeads;
    const factor = scale ?? 1 / Math.sqrt(d);
    const row = kvHeads * d;
    const out = new Float32Array(batch * heads * d);
    const scores = new Float64Array(this.length);
    const sum = new Float64Array(d);
    for (let b = 0; b < batch; b++) {
      const base = b * this.capacity * row;
      for (let h = 0; h < heads; h++) {
        const qAt = (b * heads + h) * d;
        const kvAt = base + Math.floor(h / group) * d;
        let top = -Infinity;
        for (let j = 0; j < this.length; j++) {
          let dot = 0;
          const at = kvAt + j * row;
          for (let i = 0; i < d; i++) dot += q.data[qAt + i]! * this.keys[at + i]!;
          scores[j] = dot * factor;
          if (scores[j]! > top) top = scores[j]!;
        }
        sum.fill(0);
        let total = 0;
        for (let j = 0; j < this.length; j++) {
          const p = Math.exp(scores[j]! - top);
          total += p;
          const at = kvAt + j * row;
          for (let i = 0; i < d; i++) sum[i]! += p * this.values[at + i]!;
        }
        for (let i = 0; i < d; i++) out[qAt + i] = sum[i]! / total;
      }
    }
    return new Tensor("float32", [batch, 1, heads, d], out);
  }

  /** The cached tokens as [b, length, kvHeads, D]: a view when b is 1, else a compact copy. */
  private cached(store: Float32Array, row: number, batch: number): F32 {
    const { kvHeads, headDim } = this.shape!;
    const shape = [batch, this.length, kvHeads, headDim];
    if (batch === 1) return new Tensor("float32", shape, store.subarray(0, this.length * row));
    const out = new Float32Array(batch * this.length * row);
    for (let b = 0; b < batch; b++) out.set(store.subarray(b * this.capacity * row, (b * this.capacity + this.length) * row), b * this.length * row);
    return new Tensor("float32", shape, out);
  }

  /** A larger cache, holding the cached tokens. */
  private grow(capacity: number, row: number, batch: number): void {
    const keys = new Float32Array(batch * capacity * row);
    const values = new Float32Array(batch * capacity * row);
    for (let b = 0; b < batch; b++) {
      const from = b * this.capacity * row;
      keys.set(this.keys.subarray(from, from + this.length * row), b * capacity * row);
      values.set(this.values.subarray(from, from + this.length * row), b * capacity * row);
    }
    this.keys = keys;
    this.values = values;
    this.capacity = capacity;
  }

  backward(): Promise<AttentionGradients> {
    return Promise.reject(new ModelError(`${this.name}: decoding with a cache is forward only; there is no backward`));
  }

  release(context: KvCacheContext): void {
    if (context instanceof KvCacheContext) context.released = true;
  }
}

/** A Gpt decoding with a cache per layer; restore() gives the blocks their attention back. */
export class GptDecoder {
  readonly caches: KvCacheAttention[];
  private readonly previous: BlockAttention[];

  constructor(
    readonly model: Gpt,
    local: LocalAttention,
  ) {
    const grouped = model.blocks.findIndex((b) => b.attentionHeadGroups !== 1);
    if (grouped >= 0) throw new ModelError(`GptDecoder: block ${grouped} runs its attention in head groups; a cache needs every head in one call`);
    this.previous = model.blocks.map((b) => b.attention);
    this.caches = model.blocks.map(() => new KvCacheAttention(local, model.config.maxSeq));
    model.blocks.forEach((b, i) => {
      b.attention = this.caches[i]!;
    });
  }

  /** Tokens decoded so far (the next token's position). */
  get length(): number {
    return this.caches[0]?.length ?? 0;
  }

  /**
   * Runs `tokens` (one sequence) at positions length .. length + n - 1 and
   * returns the last one's logits [vocab] (a copy).
   */
  async append(tokens: readonly number[]): Promise<Float32Array> {
    if (tokens.length === 0) throw new ModelError("GptDecoder.append: no tokens");
    const { hidden, maxSeq } = this.model.config;
    if (this.length + tokens.length > maxSeq)
      throw new ModelError(`GptDecoder.append: ${this.length} decoded + ${tokens.length} new tokens exceed maxSeq ${maxSeq}`);
    const position = this.length;
    const context = await this.model.forward(Tensor.from("int32", [1, tokens.length], tokens), { positions: position, logits: false });
    try {
      // hFinal [n, hidden] -> its last row [1, hidden]: the head runs on one row
      const h = context.hFinal!;
      const last = new Tensor("float32", [1, hidden], h.data.slice((tokens.length - 1) * hidden, tokens.length * hidden));
      const logits = await this.model.lmHead().forward(last);
      return Float32Array.from(logits.data);
    } finally {
      this.model.release(context);
    }
  }

  /** Empties every layer's cache. */
  reset(): void {
    for (const cache of this.caches) cache.reset();
  }

  /** Gives every block its attention back (the decoder is unusable afterwards). */
  restore(): void {
    this.model.blocks.forEach((b, i) => {
      b.attention = this.previous[i]!;
    });
  }
}
