/**
 * UlyssesAttention: DeepSpeed-Ulysses sequence parallelism around any
 * LocalAttention. Per rank (b batch, s_r = this rank's tokens, N = all tokens,
 * h_r = this rank's query heads, k_r = its kv heads):
 *
 *   q [b, s_r, H, D], k, v [b, s_r, Hkv, D]
 *   seqToHeads (q, k, v in one all-to-all, or in chunks of 4 MiB)
 *   q [b, N, h_r, D], k, v [b, N, k_r, D]
 *   local attention (causal = plain causal: every rank holds the whole sequence)
 *   out [b, N, h_r, D]
 *   headsToSeq (one all-to-all)
 *   out [b, s_r, H, D]
 *
 * Backward is the same three steps, each exchange replaced by its inverse
 * (`seq-all-to-all.ts`, one reversible primitive): seqToHeads(dOut), the
 * local backward, headsToSeq(dq, dk, dv) in one all-to-all, summing the
 * gradients of kv heads replicated on several ranks. Head and kv routing:
 * `head-routing.ts`; sequence shards: `sequence-shards.ts`.
 */
import type { AttentionGradients, AttentionOptions, LocalAttention } from "@ulysses/kernels";
import type { ProcessGroup } from "@ulysses/collectives";
import type { Tensor } from "@ulysses/tensors";
import { checkGradShape, checkOwnContext, exclusive, KeptLocalStatistics, SavedLocalAttention, type KeptAttention } from "@ulysses/block";
import { ParallelError } from "./errors.js";
import { ScratchBuffers } from "./head-exchange.js";
import { checkHeads, headRouting, type HeadRouting } from "./head-routing.js";
import { aroundHeads, aroundHeadsBackward, checkChunkBytes, EXCHANGE_CHUNK_BYTES, seqToHeads, type SeqExchange } from "./seq-all-to-all.js";
import { joinRuns, sequenceShards, type SequenceShards } from "./sequence-shards.js";
import { documentSlice, shardDims, type ShardedAttention, type ShardedAttentionForward, type ShardedAttentionOptions } from "./sharded-attention.js";
import { TensorPool } from "./tensor-pool.js";

type F32 = Tensor<"float32">;

/** What Ulysses forward keeps for backward: the head-scattered q, k, v, out [b, N, h_r or k_r, D] and log-sum-exp [b, h_r, N]. */
export type UlyssesContext = SavedLocalAttention<{ routing: HeadRouting; shards: SequenceShards }>;

export interface UlyssesAttentionOptions {
  /** Bytes of each exchange's send and receive areas at most (`SeqExchange.chunkBytes`; default EXCHANGE_CHUNK_BYTES, 4 MiB). */
  exchangeChunkBytes?: number;
}

export class UlyssesAttention implements ShardedAttention<UlyssesContext> {
  readonly name: string;
  busy = false;
  private readonly scratch = new ScratchBuffers();
  private readonly pool = new TensorPool();
  private readonly chunkBytes: number;

  constructor(
    readonly local: LocalAttention,
    readonly group: ProcessGroup,
    options: UlyssesAttentionOptions = {},
  ) {
    this.name = `ulysses(${local.name}, P=${group.size})`;
    this.chunkBytes = checkChunkBytes(options.exchangeChunkBytes ?? EXCHANGE_CHUNK_BYTES, `${this.name} exchangeChunkBytes`);
  }

  checkHeads(heads: number, kvHeads: number): void {
    checkHeads(heads, kvHeads, this.group.size);
  }

  /** The head routing for this group. */
  routing(heads: number, kvHeads: number): HeadRouting {
    return headRouting(heads, kvHeads, this.group.size);
  }

  /** Bytes held by the reusable exchange buffers. */
  get scratchBytes(): number {
    return this.scratch.bytes;
  }

  async forward(q: F32, k: F32, v: F32, options: ShardedAttentionOptions): Promise<ShardedAttentionForward<UlyssesContext>> {
    const { batch: b, seq: s, heads, kvHeads } = shardDims(q, k, v, this.name);
    const routing = this.routing(heads, kvHeads);
    const shards = sequenceShards(s, this.group.rank, this.group.size, options);
    if (joinRuns(shards.runs).length !== 1)
      throw new ParallelError(
        `${this.name}: the ranks' tokens must follow each other in sequence order (contiguous layout); zigzag runs with ring or hybrid attention`,
      );
    // every rank holds the whole sequence now: the documents are the whole sequence's
    const ids = documentSlice(options.sequenceDocuments, b, shards.length, 0, shards.length, this.name);
    return exclusive(this, async () => {
      // the exchanges are done before the kernel and start after it (its backward reuses these options): it may run on this thread
      const localOptions: AttentionOptions = { causal: options.causal, scale: options.scale, onCallerThread: true };
      if (ids !== null) localOptions.documents = { query: ids, key: ids };
      return aroundHeads(this.exchange(routing, shards), q, k, v, async (qh, kh, vh) => {
        const local = await this.local.forward(qh, kh, vh, localOptions);
        const context: UlyssesContext = new SavedLocalAttention(this, { routing, shards }, localOptions, qh, kh, vh, local.out, local.logSumExp);
        return { out: local.out, context };
      });
    });
  }

  async backward(context: UlyssesContext, dOut: F32): Promise<AttentionGradients> {
    checkOwnContext(this, context, this.name, "backward", (message) => new ParallelError(message));
    const { routing, shards } = context.layout;
    const [b, , , d] = context.q.shape as unknown as [number, number, number, number];
    checkGradShape(dOut, [b, shards.sizes[this.group.rank]!, routing.heads, d], this.name);
    return exclusive(this, async () => {
      return aroundHeadsBackward(this.exchange(routing, shards), dOut, (dOutH) => context.localBackward(this.local, dOutH));
    });
  }

  release(context: UlyssesContext, ...tensors: F32[]): void {
    if (context.owner !== this || context.released) return;
    context.released = true;
    // out is the kernel's own in a forward's context (the pool ignores it), the pool's in a restored one
    this.pool.give(context.q, context.k, context.v, context.out, ...tensors);
  }

  /** Gives the exchanged q, k, v back and keeps the log-sum-exp: `restore` exchanges q, k, v and out again instead of running the kernel. */
  keepOutput(context: UlyssesContext): KeptLocalStatistics<UlyssesContext["layout"]> {
    checkOwnContext(this, context, this.name, "keepOutput", (message) => new ParallelError(message));
    this.release(context);
    return context.keepStatistics();
  }

  /** q, k, v made again and the forward's out [b, s_r, H, D] to heads in one all-to-all, with the kept log-sum-exp: the forward's context, no kernel run. */
  async restore(kept: KeptAttention, q: F32, k: F32, v: F32, out: F32): Promise<UlyssesContext> {
    const stats = KeptLocalStatistics.ownedBy<UlyssesContext["layout"]>(kept, this, this.name);
    const { routing, shards } = stats.layout;
    shardDims(q, k, v, this.name);
    checkGradShape(out, q.shape, this.name);
    return exclusive(this, async () => {
      const [qh, kh, vh, oh] =
        this.group.size === 1
          ? [q, k, v, out]
          : await seqToHeads(this.exchange(routing, shards), [
              { tensor: q, heads: "q" },
              { tensor: k, heads: "kv" },
              { tensor: v, heads: "kv" },
              { tensor: out, heads: "q" },
            ]);
      return stats.restored(qh, kh, vh, oh);
    });
  }

  /** This group's exchanges for one head routing and sequence split, on this instance's buffers. */
  private exchange(routing: HeadRouting, shards: SequenceShards): SeqExchange {
    return { group: this.group, routing, shards, scratch: this.scratch, pool: this.pool, chunkBytes: this.chunkBytes };
  }
}
