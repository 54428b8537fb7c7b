/**
 * UlyssesAttention: DeepSpeed-Ulysses sequence parallelism around any
 * LocalAttention. Per rank (b batch, s_r = this rank's tokens, N = all tokens,
 * h_r = this rank's query heads, k_r = its kv heads):
 *
 *   q [b, s_r, H, D], k, v [b, s_r, Hkv, D]
 *   all-to-all #1 (scatter heads, gather sequence; q, k, v in one exchange)
 *   q [b, N, h_r, D], k, v [b, N, k_r, D]
 *   local attention (causal = plain causal: every rank holds the whole sequence)
 *   out [b, N, h_r, D]
 *   all-to-all #2 (scatter sequence, gather heads)
 *   out [b, s_r, H, D]
 *
 * Backward is the mirror: dOut goes through #1's layout change, the local
 * backward runs, and dq, dk, dv go back through #2's (one exchange); kv heads
 * replicated on several ranks have their gradients summed on the way back.
 * Head and kv routing: `head-routing.ts`; sequence shards: `sequence-shards.ts`.
 */
import type { AttentionGradients, LocalAttention } from "@ulysses/kernels";
import type { ProcessGroup } from "@ulysses/collectives";
import { Tensor } from "@ulysses/tensors";
import { BlockError } from "./errors.js";
import { gatherHeads, readSeqBlock, scatterHeads, ScratchBuffers, writeSeqBlock } from "./head-exchange.js";
import { checkHeads, headRouting, type HeadRouting } from "./head-routing.js";
import { sequenceShards, type SequenceShards } from "./sequence-shards.js";
import { TensorPool } from "./tensor-pool.js";
import {
  checkGradShape,
  exclusive,
  SavedLocalAttention,
  shardDims,
  type ShardedAttention,
  type ShardedAttentionForward,
  type ShardedAttentionOptions,
} from "./sharded-attention.js";

type F32 = Tensor<"float32">;

/** What Ulysses forward keeps for backward: the head-scattered q, k, v, out [b, N, h_r or k_r, D] and log-sum-exp [b, h_r, N]. */
export class UlyssesContext extends SavedLocalAttention {
  constructor(
    readonly owner: UlyssesAttention,
    readonly routing: HeadRouting,
    readonly shards: SequenceShards,
    options: ShardedAttentionOptions,
    q: F32,
    k: F32,
    v: F32,
    out: F32,
    logSumExp: F32,
  ) {
    super(options, q, k, v, out, logSumExp);
  }
}

function range(start: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => start + i);
}

export class UlyssesAttention implements ShardedAttention<UlyssesContext> {
  readonly name: string;
  busy = false;
  private readonly scratch = new ScratchBuffers();
  private readonly pool = new TensorPool();
  private readonly routings = new Map<string, HeadRouting>();

  constructor(
    readonly local: LocalAttention,
    readonly group: ProcessGroup,
  ) {
    this.name = `ulysses(${local.name}, P=${group.size})`;
  }

  checkHeads(heads: number, kvHeads: number): void {
    checkHeads(heads, kvHeads, this.group.size);
  }

  /** The head routing for this group (cached per head configuration). */
  routing(heads: number, kvHeads: number): HeadRouting {
    const key = `${heads}/${kvHeads}`;
    let routing = this.routings.get(key);
    if (routing === undefined) {
      routing = headRouting(heads, kvHeads, this.group.size);
      this.routings.set(key, routing);
    }
    return routing;
  }

  /** Bytes held by the reusable exchange buffers. */
  get scratchBytes(): number {
    return this.scratch.bytes;
  }

  async forward(q: F32, k: F32, v: F32, options: ShardedAttentionOptions): Promise<ShardedAttentionForward<UlyssesContext>> {
    const { batch: b, seq: s, heads, kvHeads, headDim: d } = shardDims(q, k, v, this.name);
    const routing = this.routing(heads, kvHeads);
    const shards = sequenceShards(s, this.group.rank, this.group.size, options);
    return exclusive(this, async () => {
      const r = this.group.rank;
      const myQ = routing.q[r]!;
      const myKv = routing.kv[r]!;
      const n = shards.length;

      // #1: q [b, s_r, H, D], k, v [b, s_r, Hkv, D] -> per rank j: q [b, s_r, h_j, D] ++ k, v [b, s_r, k_j, D].
      const inputSplits = routing.q.map((qr, j) => b * s * (qr.count + 2 * routing.kv[j]!.length));
      const outputSplits = shards.sizes.map((sj) => b * sj * (myQ.count + 2 * myKv.length));
      const send = this.scratch.get("send", sum(inputSplits) * d);
      let o = 0;
      for (let j = 0; j < routing.worldSize; j++) {
        const kvj = routing.kv[j]!;
        o = gatherHeads(q, range(routing.q[j]!.start, routing.q[j]!.count), send, o);
        o = gatherHeads(k, kvj, send, o);
        o = gatherHeads(v, kvj, send, o);
      }
      const recv = await this.exchange(send, inputSplits, outputSplits, d);
      // per source j: q [b, s_j, h_r, D] ++ k, v [b, s_j, k_r, D] -> tokens [t_j, t_j + s_j) of q [b, N, h_r, D], k, v [b, N, k_r, D].
      const qh = this.pool.take([b, n, myQ.count, d], false);
      const kh = this.pool.take([b, n, myKv.length, d], false);
      const vh = this.pool.take([b, n, myKv.length, d], false);
      o = 0;
      for (let j = 0; j < routing.worldSize; j++) {
        const [start, len] = [shards.starts[j]!, shards.sizes[j]!];
        o = writeSeqBlock(recv, o, qh, start, len);
        o = writeSeqBlock(recv, o, kh, start, len);
        o = writeSeqBlock(recv, o, vh, start, len);
      }

      const local = await this.local.forward(qh, kh, vh, { causal: options.causal, scale: options.scale });

      // #2: out [b, N, h_r, D] -> per rank j: [b, s_j, h_r, D] blocks.
      const backSplits = shards.sizes.map((sj) => b * sj * myQ.count);
      const gatherSplits = routing.q.map((qr) => b * s * qr.count);
      const send2 = this.scratch.get("send", sum(backSplits) * d);
      o = 0;
      for (let j = 0; j < routing.worldSize; j++) o = readSeqBlock(local.out, shards.starts[j]!, shards.sizes[j]!, send2, o);
      const recv2 = await this.exchange(send2, backSplits, gatherSplits, d);
      // per source j: [b, s_r, h_j, D] blocks -> out [b, s_r, H, D].
      const out = this.pool.take([b, s, heads, d], false);
      o = 0;
      for (let j = 0; j < routing.worldSize; j++) o = scatterHeads(recv2, o, out, range(routing.q[j]!.start, routing.q[j]!.count), false);

      const context = new UlyssesContext(this, routing, shards, { ...options }, qh, kh, vh, local.out, local.logSumExp);
      return { out, context };
    });
  }

  async backward(context: UlyssesContext, dOut: F32): Promise<AttentionGradients> {
    if (!(context instanceof UlyssesContext) || context.owner !== this || context.released) {
      throw new BlockError(`${this.name}: backward needs the (unreleased) context its own forward returned`);
    }
    const { routing, shards } = context;
    const r = this.group.rank;
    const myQ = routing.q[r]!;
    const myKv = routing.kv[r]!;
    const [b, , , d] = context.q.shape as unknown as [number, number, number, number];
    const s = shards.sizes[r]!;
    checkGradShape(dOut, [b, s, routing.heads, d], this.name);
    return exclusive(this, async () => {
      // Mirror of #2: dOut [b, s_r, H, D] -> per rank j: [b, s_r, h_j, D] blocks.
      const inputSplits = routing.q.map((qr) => b * s * qr.count);
      const outputSplits = shards.sizes.map((sj) => b * sj * myQ.count);
      const send = this.scratch.get("send", sum(inputSplits) * d);
      let o = 0;
      for (let j = 0; j < routing.worldSize; j++) o = gatherHeads(dOut, range(routing.q[j]!.start, routing.q[j]!.count), send, o);
      const recv = await this.exchange(send, inputSplits, outputSplits, d);
      // per source j: [b, s_j, h_r, D] blocks -> dOut [b, N, h_r, D].
      const dOutH = this.pool.take([b, shards.length, myQ.count, d], false);
      o = 0;
      for (let j = 0; j < routing.worldSize; j++) o = writeSeqBlock(recv, o, dOutH, shards.starts[j]!, shards.sizes[j]!);

      const grads = await context.localBackward(this.local, dOutH);
      this.pool.give(dOutH);

      // Mirror of #1: dq [b, N, h_r, D], dk, dv [b, N, k_r, D] -> per rank j: dq [b, s_j, h_r, D] ++ dk, dv [b, s_j, k_r, D].
      const backSplits = shards.sizes.map((sj) => b * sj * (myQ.count + 2 * myKv.length));
      const gatherSplits = routing.q.map((qr, j) => b * s * (qr.count + 2 * routing.kv[j]!.length));
      const send2 = this.scratch.get("send", sum(backSplits) * d);
      o = 0;
      for (let j = 0; j < routing.worldSize; j++) {
        const [start, len] = [shards.starts[j]!, shards.sizes[j]!];
        o = readSeqBlock(grads.dq, start, len, send2, o);
        o = readSeqBlock(grads.dk, start, len, send2, o);
        o = readSeqBlock(grads.dv, start, len, send2, o);
      }
      const recv2 = await this.exchange(send2, backSplits, gatherSplits, d);
      // per source j: dq [b, s_r, h_j, D] ++ dk, dv [b, s_r, k_j, D] -> dq [b, s_r, H, D], dk, dv [b, s_r, Hkv, D] (replicas summed).
      const dq = this.pool.take([b, s, routing.heads, d], false);
      const dk = this.pool.take([b, s, routing.kvHeads, d], true);
      const dv = this.pool.take([b, s, routing.kvHeads, d], true);
      o = 0;
      for (let j = 0; j < routing.worldSize; j++) {
        const kvj = routing.kv[j]!;
        o = scatterHeads(recv2, o, dq, range(routing.q[j]!.start, routing.q[j]!.count), false);
        o = scatterHeads(recv2, o, dk, kvj, true);
        o = scatterHeads(recv2, o, dv, kvj, true);
      }
      return { dq, dk, dv };
    });
  }

  release(context: UlyssesContext, ...tensors: F32[]): void {
    if (context.owner !== this || context.released) return;
    context.released = true;
    this.pool.give(context.q, context.k, context.v, ...tensors);
  }

  /** One all-to-all over rows of D floats; returns the received floats (a reused buffer). */
  private async exchange(send: Float32Array, inputSplits: number[], outputSplits: number[], d: number): Promise<Float32Array> {
    const rows = sum(outputSplits);
    const output = new Tensor("float32", [rows, d], this.scratch.get("recv", rows * d));
    const input = new Tensor("float32", [sum(inputSplits), d], send);
    const result = await this.group.allToAll(input, { inputSplits, outputSplits, output });
    return result.data as Float32Array;
  }
}

function sum(values: readonly number[]): number {
  let total = 0;
  for (const v of values) total += v;
  return total;
}
