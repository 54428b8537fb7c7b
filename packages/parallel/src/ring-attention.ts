/**
 * RingAttention: sequence parallelism by passing key/value blocks around the
 * ring of the group. Rank r keeps its queries q [b, s_r, H, D] (global
 * positions [t_r, t_r + s_r)); at ring step t it holds block j = (r − t) mod P,
 * the k, v [b, s_j, Hkv, D] of rank j, runs the local kernel on (q, k_j, v_j),
 * and merges the partial outputs by their log-sum-exps:
 *
 *   lse = log Σ_j exp(lse_j),   out = Σ_j exp(lse_j − lse) · out_j
 *
 * (a block whose lse_j is −Infinity for a query, no key seen, adds nothing).
 * Step t sends the held block to r + 1 and receives the next from r − 1
 * (point-to-point, receives sized from the shard sizes) before the kernel
 * runs, and awaits both after it: the kernel runs off the JS thread, so the
 * transfer overlaps the compute (`overlap: false` awaits the transfer first,
 * to measure what the overlap hides; `stats` times both).
 *
 * Causal masking follows the sequence layout (`sequence-shards.ts`): every
 * rank's tokens are runs of global positions in increasing order. Block r
 * (the own one) is one causal call. For block j ≠ r, a query run sees the
 * key runs before it in full and none after it (runs of two ranks never
 * interleave), so each call takes a run of queries and a prefix of the
 * block's keys:
 * - contiguous: blocks j < r are full calls, and blocks j > r never travel
 *   to r at all (rank r holds steps 0..r only; the last rank sends nothing
 *   forward): rank P − 1 computes P times rank 0's work;
 * - zigzag (rank r holds chunks r and 2P − 1 − r of 2P): block j < r is all
 *   queries against its first chunk, block j > r is the second query chunk
 *   against all its keys: the same work on every rank, and every block
 *   travels the whole ring.
 * Non-causal: every block, full calls, P − 1 transfers.
 * Packed documents: each call gets the document ids of its queries and keys;
 * a call no row's query documents overlap is skipped (the block is still
 * relayed).
 *
 * Backward runs the same ring on k, v with the merged out and lse saved: each
 * block's local backward gives the exact partial dq (summed here) and dk_j,
 * dv_j (the kernel takes P from the lse and D = dOut · out from the out it is
 * given, as the LocalAttention contract says; ReferenceAttention recomputes
 * both from q and k and is refused for P > 1: StatsReferenceAttention is the
 * float64 reference that reads them). Block j's dk, dv accumulator
 * goes once around the ring behind its k, v: the owner keeps its own part,
 * rank j + 1 starts the accumulator at step 1, each next rank adds its part
 * (or relays it: causal ranks r < j, and blocks whose documents it skips),
 * and after P − 1 hops rank j − 1 hands it home. Causal block P − 1 has no
 * other user and does not travel. Every operation of a group runs in call
 * order and a send may wait for its receive, so each round (k, v before the
 * kernel, dk, dv after it) posts even ranks' sends first and odd ranks'
 * receives first.
 *
 * Bytes sent per rank (c = 2·b·Hkv·D·4 per token, k and v or dk and dv):
 *   forward:  c · Σ s_j over the blocks r sends (non-causal and zigzag: every
 *             j but r + 1; contiguous causal: j <= r for r < P − 1, none for
 *             r = P − 1)
 *   backward: the forward's again (k, v) + c · Σ s_j over every j ≠ r
 *             (contiguous causal: also j ≠ P − 1): `ringForwardBytes`,
 *             `ringBackwardBytes` (their `skipsFuture` is true for the
 *             contiguous causal case only).
 * Equal shards, non-causal or zigzag: (P − 1)·c·s forward, 2·(P − 1)·c·s
 * backward. (Contiguous causal relays accumulators past ranks that did not
 * use them; sending them home from rank P − 1 directly is left to later.)
 */
import { checkGradShape, checkOwnContext, exclusive, SavedLocalAttention } from "@ulysses/block";
import type { ProcessGroup } from "@ulysses/collectives";
import { ReferenceAttention, type AttentionGradients, type LocalAttention } from "@ulysses/kernels";
import { narrow, type Tensor } from "@ulysses/tensors";
import { ParallelError } from "./errors.js";
import { checkHeads } from "./head-routing.js";
import { sequenceShards } from "./sequence-shards.js";
import { shardDims, type ShardedAttention, type ShardedAttentionForward, type ShardedAttentionOptions } from "./sharded-attention.js";
import { TensorPool } from "./tensor-pool.js";
import { addInto, addRows, mergeInto } from "./ring-math.js";
import { carries, ringHolds, RingPlan } from "./ring-plan.js";

export { ringBackwardBytes, ringForwardBytes, ringHolds, ringSends, type BlockCall } from "./ring-plan.js";

type F32 = Tensor<"float32">;

/** Point-to-point tags: k, v and the dk, dv accumulators, all to r + 1. */
const TAGS = { k: 7101, v: 7102, dk: 7103, dv: 7104 } as const;

/** What ring forward keeps: this rank's q, k, v, the merged out [b, s_r, H, D] and log-sum-exp [b, H, s_r]. */
export type RingContext = SavedLocalAttention<RingPlan>;

export interface RingAttentionOptions {
  /** Post the next block's transfer before the current block computes (default true); false awaits it first. */
  overlap?: boolean;
}

/** Where one rank's ring time went, summed over calls since the last reset (milliseconds). */
export interface RingStats {
  /** In local kernel calls (forward and backward). */
  computeMs: number;
  /** Awaiting k, v (and dk, dv) transfers after (or, without overlap, before) the compute. */
  waitMs: number;
  /** Local kernel calls made. */
  calls: number;
}

export class RingAttention implements ShardedAttention<RingContext> {
  readonly name: string;
  busy = false;
  readonly overlap: boolean;
  readonly stats: RingStats = { computeMs: 0, waitMs: 0, calls: 0 };
  private readonly pool = new TensorPool();

  constructor(
    readonly local: LocalAttention,
    readonly group: ProcessGroup,
    options: RingAttentionOptions = {},
  ) {
    this.overlap = options.overlap ?? true;
    this.name = `ring(${local.name}, P=${group.size})`;
    if (group.size > 1 && local instanceof ReferenceAttention) {
      throw new ParallelError(
        `${this.name}: ReferenceAttention's backward recomputes the probabilities from q and k instead of the logSumExp and out it is given, ` +
          `so ring blocks would get their own softmax's gradients; use OrtAttention, FusedAttention, StatsReferenceAttention or another kernel whose backward reads them`,
      );
    }
  }

  checkHeads(heads: number, kvHeads: number): void {
    // Every rank holds every head: only the GQA rule applies (as on one rank).
    checkHeads(heads, kvHeads, 1);
  }

  resetStats(): void {
    this.stats.computeMs = 0;
    this.stats.waitMs = 0;
    this.stats.calls = 0;
  }

  async forward(q: F32, k: F32, v: F32, options: ShardedAttentionOptions): Promise<ShardedAttentionForward<RingContext>> {
    const { batch: b, seq: s, heads, kvHeads } = shardDims(q, k, v, this.name);
    this.checkHeads(heads, kvHeads);
    const { rank, size } = this.group;
    const shards = sequenceShards(s, rank, size, options);
    const plan = new RingPlan(shards, rank, b, options.causal, options.scale, options.sequenceDocuments, this.name);
    return exclusive(this, async () => {
      let out: F32 | null = null;
      let lse64 = new Float64Array(0);
      let lse: F32 | null = null;
      await this.ring(k, v, plan, async (_step, block, kBlock, vBlock) => {
        for (const call of plan.blockCalls(block)) {
          const qPart = call.qLength === s ? q : narrow(q, 1, call.qStart, call.qLength);
          const [kPart, vPart] =
            call.kLength === shards.sizes[block]! ? [kBlock, vBlock] : [narrow(kBlock, 1, 0, call.kLength), narrow(vBlock, 1, 0, call.kLength)];
          const part = await this.timed(() => this.local.forward(qPart, kPart, vPart, call.options));
          if (out === null) {
            // the own block comes first, as one call over every query
            if (call.qLength !== s) throw new ParallelError(`${this.name}: rank ${rank}'s first call covers ${call.qLength} of its ${s} queries`);
            out = part.out;
            lse = part.logSumExp;
            lse64 = Float64Array.from(lse.data);
          } else {
            mergeInto(out, lse64, part.out, part.logSumExp, call.qStart);
          }
        }
      });
      // the own block (step 0) is always computed: its queries see their own keys
      if (out === null || lse === null) throw new ParallelError(`${this.name}: rank ${rank} computed no block (its own block was skipped)`);
      const merged: F32 = lse;
      merged.data.set(lse64);
      const context: RingContext = new SavedLocalAttention(this, plan, { causal: options.causal, scale: options.scale }, q, k, v, out, merged);
      return { out, context };
    });
  }

  async backward(context: RingContext, dOut: F32): Promise<AttentionGradients> {
    checkOwnContext(this, context, this.name, "backward", (message) => new ParallelError(message));
    checkGradShape(dOut, context.out.shape, this.name);
    return exclusive(this, async () => {
      const { q, k, v, out, logSumExp } = context;
      const plan = context.layout;
      const { rank, size } = this.group;
      const { skipsFuture, shards } = plan;
      const s = shards.sizes[rank]!;
      const [b, , kvHeads, d] = k.shape as unknown as [number, number, number, number];
      const blockShape = (block: number) => [b, shards.sizes[block]!, kvHeads, d];
      const sent: F32[] = [];
      const rounds: Promise<unknown>[] = [];
      let dq: F32 | null = null;
      let own: AttentionGradients | null = null;
      let kBlock: F32 | null = k;
      let vBlock: F32 | null = v;
      // block j's dk, dv accumulator, arriving from r − 1 for the next step (at the last step: this rank's own block, home)
      let incoming: Promise<F32[]> | null = null;
      for (let step = 0; step < size; step++) {
        const block = (rank - step + size) % size;
        const held: boolean = kBlock !== null && vBlock !== null && ringHolds(rank, size, step, skipsFuture);
        const kv: { next: [F32, F32] | null; moving: Promise<unknown> } | null = held ? this.kvRound(step, plan, kBlock!, vBlock!) : null;
        if (kv !== null && !this.overlap) await this.waited(kv.moving);
        // this block's dk, dv from every call (null: no call), sized like the block
        let dkBlock: F32 | null = null;
        let dvBlock: F32 | null = null;
        let pooled = false;
        for (const call of held ? plan.blockCalls(block) : []) {
          const keys = shards.sizes[block]!;
          const rows = call.qLength === s ? null : ([call.qStart, call.qLength] as const);
          const slice = (t: F32) => (rows === null ? t : narrow(t, 1, rows[0], rows[1]));
          const [kPart, vPart] = call.kLength === keys ? [kBlock!, vBlock!] : [narrow(kBlock!, 1, 0, call.kLength), narrow(vBlock!, 1, 0, call.kLength)];
          const lsePart = rows === null ? logSumExp : narrow(logSumExp, 2, rows[0], rows[1]);
          const grads = await this.timed(() => this.local.backward(slice(q), kPart, vPart, slice(out), slice(dOut), lsePart, call.options));
          if (dq === null) {
            if (rows !== null) throw new ParallelError(`${this.name}: rank ${rank}'s first backward call covers ${call.qLength} of its ${s} queries`);
            dq = grads.dq;
          } else addRows(dq, grads.dq, call.qStart);
          if (call.kLength === keys && dkBlock === null) {
            dkBlock = grads.dk;
            dvBlock = grads.dv;
          } else {
            if (dkBlock === null) {
              dkBlock = this.pool.take(blockShape(block), true);
              dvBlock = this.pool.take(blockShape(block), true);
              pooled = true;
            }
            addRows(dkBlock, grads.dk, 0);
            addRows(dvBlock!, grads.dv, 0);
          }
        }
        if (step === 0) own = dkBlock === null ? null : { dq: dq!, dk: dkBlock, dv: dvBlock! };
        let outgoing: F32[] | null = null;
        if (step >= 1 && carries(block, size, skipsFuture)) {
          // the first user after the owner starts the accumulator; later ones add to the one from r − 1, or relay it
          if (step === 1) {
            outgoing = [dkBlock ?? this.pool.take(blockShape(block), true), dvBlock ?? this.pool.take(blockShape(block), true)];
          } else {
            outgoing = await this.waited(incoming!);
            if (dkBlock !== null) {
              addInto(outgoing[0]!, dkBlock);
              addInto(outgoing[1]!, dvBlock!);
              if (pooled) this.pool.give(dkBlock, dvBlock!);
            }
          }
          sent.push(...outgoing);
        }
        const nextBlock = (block - 1 + size) % size;
        const receive =
          step >= 1 && carries(nextBlock, size, skipsFuture)
            ? [this.pool.take(blockShape(nextBlock), false), this.pool.take(blockShape(nextBlock), false)]
            : null;
        // ACC round `step`: this accumulator to r + 1, the next one from r − 1
        const moving = this.round(outgoing, receive, [TAGS.dk, TAGS.dv]);
        rounds.push(moving);
        incoming = receive === null ? null : moving.then(() => receive);
        if (kv !== null) await this.waited(kv.moving);
        if (step > 0 && held) this.pool.give(kBlock!, vBlock!);
        [kBlock, vBlock] = kv?.next ?? [null, null];
      }
      const home = incoming === null ? null : await this.waited(incoming);
      await this.waited(Promise.all(rounds));
      this.pool.give(...sent);
      const mine = own as AttentionGradients | null;
      if (dq === null || mine === null) throw new ParallelError(`${this.name}: rank ${rank} computed no block (its own block was skipped)`);
      if (home === null) return { dq, dk: mine.dk, dv: mine.dv };
      return { dq, dk: addInto(home[0]!, mine.dk), dv: addInto(home[1]!, mine.dv) };
    });
  }

  release(context: RingContext, ...tensors: F32[]): void {
    if (context.owner !== this || context.released) return;
    context.released = true;
    this.pool.give(...tensors);
  }

  private async timed<T>(fn: () => Promise<T>): Promise<T> {
    const t0 = performance.now();
    try {
      return await fn();
    } finally {
      this.stats.computeMs += performance.now() - t0;
      this.stats.calls++;
    }
  }

  private async waited<T>(p: Promise<T>): Promise<T> {
    const t0 = performance.now();
    try {
      return await p;
    } finally {
      this.stats.waitMs += performance.now() - t0;
    }
  }

  /** Calls `visit` for every block this rank holds, in step order, with the next block's k, v round already posted (awaited first without overlap). */
  private async ring(k: F32, v: F32, plan: RingPlan, visit: (step: number, block: number, k: F32, v: F32) => Promise<void>): Promise<void> {
    let kBlock = k;
    let vBlock = v;
    for (let step = 0; ringHolds(this.group.rank, this.group.size, step, plan.skipsFuture); step++) {
      const block = (this.group.rank - step + this.group.size) % this.group.size;
      const { next, moving } = this.kvRound(step, plan, kBlock, vBlock);
      if (!this.overlap) await this.waited(moving);
      await visit(step, block, kBlock, vBlock);
      await this.waited(moving);
      if (step > 0) this.pool.give(kBlock, vBlock);
      if (next === null) break;
      [kBlock, vBlock] = next;
    }
  }

  /** KV round `step`: the held block to r + 1, the next step's block [b, s_j', Hkv, D] (j' = j − 1, sized from the shards) from r − 1. */
  private kvRound(step: number, plan: RingPlan, k: F32, v: F32): { next: [F32, F32] | null; moving: Promise<unknown> } {
    const { rank, size } = this.group;
    const send = ringHolds((rank + 1) % size, size, step + 1, plan.skipsFuture) ? [k, v] : null;
    let next: [F32, F32] | null = null;
    if (ringHolds(rank, size, step + 1, plan.skipsFuture)) {
      const [b, , kvHeads, d] = k.shape as unknown as [number, number, number, number];
      const shape = [b, plan.shards.sizes[(rank - step - 1 + 2 * size) % size]!, kvHeads, d];
      next = [this.pool.take(shape, false), this.pool.take(shape, false)];
    }
    return { next, moving: this.round(send, next, [TAGS.k, TAGS.v]) };
  }

  /**
   * Posts one neighbour round: `send` to r + 1 and `receive` from r − 1, one
   * tag per tensor. Every operation of a group runs in call order and a send
   * may wait for its receive, so even ranks send first and odd ranks receive
   * first: no cycle of waiting ranks, for any P.
   */
  private round(send: readonly F32[] | null, receive: readonly F32[] | null, tags: readonly number[]): Promise<unknown> {
    const { rank, size } = this.group;
    const sends = (send ?? []).map((t, i) => () => this.group.send(t, (rank + 1) % size, tags[i]));
    const receives = (receive ?? []).map((t, i) => () => this.group.recv(t, (rank - 1 + size) % size, tags[i]));
    const posted = (rank % 2 === 0 ? [...sends, ...receives] : [...receives, ...sends]).map((post) => post());
    const all = Promise.all(posted);
    all.catch(() => {});
    return all;
  }
}
