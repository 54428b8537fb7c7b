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
 * transfer overlaps the compute. Causal: block r is a causal call (equal
 * positions on the diagonal), blocks j < r full calls, and blocks j > r
 * never travel to r at all (rank r holds steps 0..r only; the last rank sends
 * nothing forward). Non-causal: every block, full calls, P − 1 transfers.
 * Packed documents: each call gets the document ids of this rank's queries
 * and of block j's keys; a block no row's query documents overlap is skipped
 * (still relayed).
 *
 * Backward runs the same ring on k, v with the merged out and lse saved: each
 * block's local backward gives the exact partial dq (summed here) and dk_j,
 * dv_j (the kernel takes P from the lse and D = dOut · out from the out it is
 * given, as the LocalAttention contract says; ReferenceAttention recomputes
 * both from q and k and is refused for P > 1). Block j's dk, dv accumulator
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
 *   forward:  c · Σ s_j over the blocks r sends (non-causal: every j but r + 1;
 *             causal: j <= r for r < P − 1, none for r = P − 1)
 *   backward: the forward's again (k, v) + c · Σ s_j over every j ≠ r
 *             (causal: also j ≠ P − 1): `ringForwardBytes`, `ringBackwardBytes`.
 * Equal shards, non-causal: (P − 1)·c·s forward, 2·(P − 1)·c·s backward.
 * (Causal relays accumulators past ranks that did not use them; sending them
 * home from rank P − 1 directly, and a zigzag layout for the causal load
 * imbalance, are left to later.)
 */
import { checkGradShape, exclusive, SavedLocalAttention } from "@ulysses/block";
import type { ProcessGroup } from "@ulysses/collectives";
import { ReferenceAttention, type AttentionGradients, type AttentionOptions, type LocalAttention } from "@ulysses/kernels";
import type { Tensor } from "@ulysses/tensors";
import { ParallelError } from "./errors.js";
import { checkHeads } from "./head-routing.js";
import { sequenceShards, type SequenceShards } from "./sequence-shards.js";
import { documentSlice, shardDims, type ShardedAttention, type ShardedAttentionForward, type ShardedAttentionOptions } from "./sharded-attention.js";
import { TensorPool } from "./tensor-pool.js";

type F32 = Tensor<"float32">;

/** Point-to-point tags: k, v and the dk, dv accumulators, all to r + 1. */
const TAGS = { k: 7101, v: 7102, dk: 7103, dv: 7104 } as const;

/** Whether `rank` holds a block at ring step `step` (the block of rank (rank − step) mod size); causal: blocks j <= rank only. */
export function ringHolds(rank: number, size: number, step: number, causal: boolean): boolean {
  return step >= 0 && step < size && (!causal || step <= rank);
}

/** The blocks `rank` sends forward (k, v) and, in backward, the accumulators it sends (dk, dv). */
export function ringSends(rank: number, size: number, causal: boolean): { kv: number[]; accumulators: number[] } {
  const kv: number[] = [];
  const accumulators: number[] = [];
  for (let t = 0; ringHolds(rank, size, t, causal); t++) {
    const block = (rank - t + size) % size;
    if (ringHolds((rank + 1) % size, size, t + 1, causal)) kv.push(block);
  }
  for (let t = 1; t < size; t++) {
    const block = (rank - t + size) % size;
    if (carries(block, size, causal)) accumulators.push(block);
  }
  return { kv, accumulators };
}

/** Bytes `rank` sends in one forward; tokenBytes = 2·b·Hkv·D·4 (one token's k and v over the batch). */
export function ringForwardBytes(sizes: readonly number[], rank: number, causal: boolean, tokenBytes: number): number {
  return ringSends(rank, sizes.length, causal).kv.reduce((n, j) => n + sizes[j]! * tokenBytes, 0);
}

/** Bytes `rank` sends in one backward (k, v around the ring again, then dk, dv accumulators). */
export function ringBackwardBytes(sizes: readonly number[], rank: number, causal: boolean, tokenBytes: number): number {
  const { accumulators } = ringSends(rank, sizes.length, causal);
  return ringForwardBytes(sizes, rank, causal, tokenBytes) + accumulators.reduce((n, j) => n + sizes[j]! * tokenBytes, 0);
}

/** Which blocks this rank computes on and with which local options (kept for backward). */
class RingPlan {
  private readonly keyIds = new Map<number, Int32Array | null>();
  readonly queryIds: Int32Array | null;

  constructor(
    readonly shards: SequenceShards,
    readonly rank: number,
    readonly batch: number,
    readonly causal: boolean,
    readonly scale: number | undefined,
    private readonly documents: Int32Array | undefined,
    private readonly who: string,
  ) {
    this.queryIds = documentSlice(documents, batch, shards.length, shards.starts[rank]!, shards.sizes[rank]!, who);
  }

  /** The local options for block j, or null when no query of this rank sees any of its keys. */
  options(block: number): AttentionOptions | null {
    if (this.causal && block > this.rank) return null;
    const options: AttentionOptions = { causal: this.causal && block === this.rank };
    if (this.scale !== undefined) options.scale = this.scale;
    if (this.queryIds === null) return options;
    let key = this.keyIds.get(block);
    if (key === undefined) {
      key = documentSlice(this.documents, this.batch, this.shards.length, this.shards.starts[block]!, this.shards.sizes[block]!, this.who);
      this.keyIds.set(block, key);
    }
    if (!documentsOverlap(this.queryIds, key!, this.batch)) return null;
    options.documents = { query: this.queryIds, key: key! };
    return options;
  }
}

/** Whether any row's query ids [b * sq] and key ids [b * sk] (non-decreasing per row) share a document range. */
function documentsOverlap(query: Int32Array, key: Int32Array, batch: number): boolean {
  const sq = query.length / batch;
  const sk = key.length / batch;
  for (let row = 0; row < batch; row++) {
    if (query[row * sq]! <= key[row * sk + sk - 1]! && key[row * sk]! <= query[row * sq + sq - 1]!) return true;
  }
  return false;
}

/** What ring forward keeps: this rank's q, k, v, the merged out [b, s_r, H, D] and log-sum-exp [b, H, s_r]. */
export type RingContext = SavedLocalAttention<RingPlan>;

export class RingAttention implements ShardedAttention<RingContext> {
  readonly name: string;
  busy = false;
  private readonly pool = new TensorPool();

  constructor(
    readonly local: LocalAttention,
    readonly group: ProcessGroup,
  ) {
    this.name = `ring(${local.name}, P=${group.size})`;
    if (group.size > 1 && local instanceof ReferenceAttention) {
      throw new ParallelError(
        `${this.name}: ReferenceAttention's backward recomputes the probabilities from q and k instead of the logSumExp and out it is given, ` +
          `so ring blocks would get their own softmax's gradients; use OrtAttention, FusedAttention or another kernel whose backward reads them`,
      );
    }
  }

  checkHeads(heads: number, kvHeads: number): void {
    // Every rank holds every head: only the GQA rule applies (as on one rank).
    checkHeads(heads, kvHeads, 1);
  }

  async forward(q: F32, k: F32, v: F32, options: ShardedAttentionOptions): Promise<ShardedAttentionForward<RingContext>> {
    const { batch: b, seq: s, heads, kvHeads } = shardDims(q, k, v, this.name);
    this.checkHeads(heads, kvHeads);
    const { rank, size } = this.group;
    const shards = sequenceShards(s, rank, size, options);
    const plan = new RingPlan(shards, rank, b, options.causal, options.scale, options.sequenceDocuments, this.name);
    return exclusive(this, async () => {
      let out: F32 | null = null;
      let lse: F32 | null = null;
      let lse64 = new Float64Array(0);
      await this.ring(k, v, plan, async (_step, block, kBlock, vBlock) => {
        const blockOptions = plan.options(block);
        if (blockOptions === null) return;
        const part = await this.local.forward(q, kBlock, vBlock, blockOptions);
        if (out === null || lse === null) {
          out = part.out;
          lse = part.logSumExp;
          lse64 = Float64Array.from(lse.data);
        } else {
          mergeInto(out, lse64, part.out, part.logSumExp);
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
    if (!(context instanceof SavedLocalAttention) || context.owner !== this || context.released) {
      throw new ParallelError(`${this.name}: backward needs the (unreleased) context its own forward returned`);
    }
    checkGradShape(dOut, context.out.shape, this.name);
    return exclusive(this, async () => {
      const { q, k, v, out, logSumExp } = context;
      const plan = context.layout;
      const { rank, size } = this.group;
      const { causal, shards } = plan;
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
        const held: boolean = kBlock !== null && vBlock !== null && ringHolds(rank, size, step, causal);
        const kv: { next: [F32, F32] | null; moving: Promise<unknown> } | null = held ? this.kvRound(step, plan, kBlock!, vBlock!) : null;
        const blockOptions = held ? plan.options(block) : null;
        const grads = blockOptions === null ? null : await this.local.backward(q, kBlock!, vBlock!, out, dOut, logSumExp, blockOptions);
        if (grads !== null) dq = dq === null ? grads.dq : addInto(dq, grads.dq);
        if (step === 0) own = grads;
        let outgoing: F32[] | null = null;
        if (step >= 1 && carries(block, size, causal)) {
          // the first user after the owner starts the accumulator; later ones add to the one from r − 1, or relay it
          if (step === 1) {
            outgoing = [grads?.dk ?? this.pool.take(blockShape(block), true), grads?.dv ?? this.pool.take(blockShape(block), true)];
          } else {
            outgoing = await incoming!;
            if (grads !== null) {
              addInto(outgoing[0]!, grads.dk);
              addInto(outgoing[1]!, grads.dv);
            }
          }
          sent.push(...outgoing);
        }
        const nextBlock = (block - 1 + size) % size;
        const receive =
          step >= 1 && carries(nextBlock, size, causal) ? [this.pool.take(blockShape(nextBlock), false), this.pool.take(blockShape(nextBlock), false)] : null;
        // ACC round `step`: this accumulator to r + 1, the next one from r − 1
        const moving = this.round(outgoing, receive, [TAGS.dk, TAGS.dv]);
        rounds.push(moving);
        incoming = receive === null ? null : moving.then(() => receive);
        if (kv !== null) await kv.moving;
        if (step > 0 && held) this.pool.give(kBlock!, vBlock!);
        [kBlock, vBlock] = kv?.next ?? [null, null];
      }
      const home = incoming === null ? null : await incoming;
      await Promise.all(rounds);
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

  /** Calls `visit` for every block this rank holds, in step order, with the next block's k, v round already posted. */
  private async ring(k: F32, v: F32, plan: RingPlan, visit: (step: number, block: number, k: F32, v: F32) => Promise<void>): Promise<void> {
    let kBlock = k;
    let vBlock = v;
    for (let step = 0; ringHolds(this.group.rank, this.group.size, step, plan.causal); step++) {
      const block = (this.group.rank - step + this.group.size) % this.group.size;
      const { next, moving } = this.kvRound(step, plan, kBlock, vBlock);
      await visit(step, block, kBlock, vBlock);
      await moving;
      if (step > 0) this.pool.give(kBlock, vBlock);
      if (next === null) break;
      [kBlock, vBlock] = next;
    }
  }

  /** KV round `step`: the held block to r + 1, the next step's block [b, s_j', Hkv, D] (j' = j − 1, sized from the shards) from r − 1. */
  private kvRound(step: number, plan: RingPlan, k: F32, v: F32): { next: [F32, F32] | null; moving: Promise<unknown> } {
    const { rank, size } = this.group;
    const send = ringHolds((rank + 1) % size, size, step + 1, plan.causal) ? [k, v] : null;
    let next: [F32, F32] | null = null;
    if (ringHolds(rank, size, step + 1, plan.causal)) {
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

/** Whether block j's dk, dv accumulator travels (causal: block P − 1 has no user but its owner). */
function carries(block: number, size: number, causal: boolean): boolean {
  return !causal || block !== size - 1;
}

/** sum += part (same shapes); returns sum. */
function addInto(sum: F32, part: F32): F32 {
  const a = sum.data;
  const x = part.data;
  for (let i = 0; i < a.length; i++) a[i]! += x[i]!;
  return sum;
}

/**
 * Merges one block's partial attention into the running one, in place:
 * out [b, s, H, D], lse [b, H, s] (float64 while merging) with part, partLse.
 */
function mergeInto(out: F32, lse: Float64Array, part: F32, partLse: F32): void {
  const [b, s, heads, d] = out.shape as unknown as [number, number, number, number];
  const o = out.data;
  const p = part.data;
  for (let row = 0; row < b; row++) {
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < s; i++) {
        const at = (row * heads + h) * s + i;
        const lj = partLse.data[at]!;
        if (lj === -Infinity) continue;
        const l = lse[at]!;
        // out [row, i, h, :]
        const base = ((row * s + i) * heads + h) * d;
        if (l === -Infinity) {
          o.set(p.subarray(base, base + d), base);
          lse[at] = lj;
          continue;
        }
        const m = Math.max(l, lj);
        const merged = m + Math.log(Math.exp(l - m) + Math.exp(lj - m));
        const a = Math.exp(l - merged);
        const c = Math.exp(lj - merged);
        for (let e = 0; e < d; e++) o[base + e] = a * o[base + e]! + c * p[base + e]!;
        lse[at] = merged;
      }
    }
  }
}
