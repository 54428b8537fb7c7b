/**
 * AllGatherKVAttention: the sequence-parallel baseline Ulysses improves on.
 * Every rank all-gathers K and V for all kv heads, then attends its own
 * queries (global positions [t_r, t_r + s_r)) over the gathered keys. Causal:
 * only keys [0, t_r + s_r) are used, and the LocalAttention bottom-right
 * convention (query i attends key j <= i + t_r) gives the global mask.
 * Backward reduce-scatters dK and dV back to the ranks that own the tokens.
 *
 *   k, v [b, s_r, Hkv, D] -> allGather -> [b, N, Hkv, D] (causal: [b, t_r + s_r, Hkv, D])
 *   local attention with q [b, s_r, H, D] -> out [b, s_r, H, D]
 *   backward: dk, dv [b, N', Hkv, D] -> reduceScatter(sum) -> [b, s_r, Hkv, D]
 *
 * Bytes per rank (equal shards, counting what goes to other ranks):
 * forward 2·(P−1)·s·b·Hkv·D·4 (allGather), backward the same (reduceScatter).
 */
import type { AttentionGradients, AttentionOptions, LocalAttention } from "@ulysses/kernels";
import type { ProcessGroup } from "@ulysses/collectives";
import { Tensor } from "@ulysses/tensors";
import { ParallelError } from "./errors.js";
import { ScratchBuffers } from "./head-exchange.js";
import { checkHeads } from "./head-routing.js";
import { isContiguous, sequenceShards, type SequenceShards } from "./sequence-shards.js";
import { TensorPool } from "./tensor-pool.js";
import { checkGradShape, checkOwnContext, exclusive, SavedLocalAttention } from "@ulysses/block";
import { documentSlice, shardDims, type ShardedAttention, type ShardedAttentionForward, type ShardedAttentionOptions } from "./sharded-attention.js";

type F32 = Tensor<"float32">;

/** What the baseline keeps: local q, out [b, s_r, H, D], gathered k, v [b, N', Hkv, D] (N' = t_r + s_r when causal, else N), log-sum-exp [b, H, s_r]. */
export type AllGatherKVContext = SavedLocalAttention<{ shards: SequenceShards }>;

export class AllGatherKVAttention implements ShardedAttention<AllGatherKVContext> {
  readonly name: string;
  busy = false;
  private readonly scratch = new ScratchBuffers();
  private readonly pool = new TensorPool();

  constructor(
    readonly local: LocalAttention,
    readonly group: ProcessGroup,
  ) {
    this.name = `allgather-kv(${local.name}, P=${group.size})`;
  }

  checkHeads(heads: number, kvHeads: number): void {
    // Every rank holds every head: only the GQA rule applies (as on one rank).
    checkHeads(heads, kvHeads, 1);
  }

  async forward(q: F32, k: F32, v: F32, options: ShardedAttentionOptions): Promise<ShardedAttentionForward<AllGatherKVContext>> {
    const { batch: b, seq: s, heads, kvHeads, headDim: d } = shardDims(q, k, v, this.name);
    this.checkHeads(heads, kvHeads);
    const shards = sequenceShards(s, this.group.rank, this.group.size, options);
    if (!isContiguous(shards)) throw new ParallelError(`${this.name}: needs the contiguous sequence layout (rank r + 1's tokens after rank r's)`);
    const queryIds = documentSlice(options.sequenceDocuments, b, shards.length, shards.starts[this.group.rank]!, s, this.name);
    const keyIds = documentSlice(
      options.sequenceDocuments,
      b,
      shards.length,
      0,
      options.causal ? shards.starts[this.group.rank]! + s : shards.length,
      this.name,
    );
    return exclusive(this, async () => {
      const row = 2 * b * kvHeads * d;
      const keys = options.causal ? shards.starts[this.group.rank]! + s : shards.length;
      // k, v [b, s_r, Hkv, D] -> [s_r, 2, b, Hkv*D]: one row per token.
      const send = this.scratch.get("send", s * row);
      interleaveKV(k, v, send, s);
      const output = new Tensor("float32", [shards.length, row], this.scratch.get("recv", shards.length * row));
      const gathered = await this.group.allGather(new Tensor("float32", [s, row], send), { sizes: shards.sizes, output });
      // [N, 2, b, Hkv*D] -> k, v [b, N', Hkv, D] (first N' tokens).
      const kAll = this.pool.take([b, keys, kvHeads, d], false);
      const vAll = this.pool.take([b, keys, kvHeads, d], false);
      splitKV(gathered.data as Float32Array, kAll, vAll, keys);
      // queries: this rank's tokens; keys: the gathered ones [0, keys)
      // the gather is done before the kernel (its backward reuses these options): it may run on this thread
      const localOptions: AttentionOptions = { causal: options.causal, scale: options.scale, onCallerThread: true };
      if (queryIds !== null && keyIds !== null) localOptions.documents = { query: queryIds, key: keyIds };
      const local = await this.local.forward(q, kAll, vAll, localOptions);
      const context: AllGatherKVContext = new SavedLocalAttention(this, { shards }, localOptions, q, kAll, vAll, local.out, local.logSumExp);
      return { out: local.out, context };
    });
  }

  async backward(context: AllGatherKVContext, dOut: F32): Promise<AttentionGradients> {
    checkOwnContext(this, context, this.name, "backward", (message) => new ParallelError(message));
    checkGradShape(dOut, context.out.shape, this.name);
    return exclusive(this, async () => {
      const { k } = context;
      const { shards } = context.layout;
      const [b, keys, kvHeads, d] = k.shape as unknown as [number, number, number, number];
      const s = shards.sizes[this.group.rank]!;
      const grads = await context.localBackward(this.local, dOut);
      const row = 2 * b * kvHeads * d;
      // dk, dv [b, N', Hkv, D] -> [N, 2, b, Hkv*D], zero beyond N'.
      const send = this.scratch.get("send", shards.length * row);
      interleaveKV(grads.dk, grads.dv, send, keys);
      send.fill(0, keys * row);
      const output = new Tensor("float32", [s, row], this.scratch.get("recv", s * row));
      const reduced = await this.group.reduceScatter(new Tensor("float32", [shards.length, row], send), { op: "sum", sizes: shards.sizes, output });
      // [s_r, 2, b, Hkv*D] -> dk, dv [b, s_r, Hkv, D].
      const dk = this.pool.take([b, s, kvHeads, d], false);
      const dv = this.pool.take([b, s, kvHeads, d], false);
      splitKV(reduced.data as Float32Array, dk, dv, s);
      return { dq: grads.dq, dk, dv };
    });
  }

  release(context: AllGatherKVContext, ...tensors: F32[]): void {
    if (context.owner !== this || context.released) return;
    context.released = true;
    this.pool.give(context.k, context.v, ...tensors);
  }
}

/** k, v [b, S, Hkv, D] (first `tokens` tokens) -> dst [tokens, 2, b, Hkv*D]. */
function interleaveKV(k: F32, v: F32, dst: Float32Array, tokens: number): void {
  const [b, seq, kvHeads, d] = k.shape as unknown as [number, number, number, number];
  const run = kvHeads * d;
  let o = 0;
  for (let t = 0; t < tokens; t++) {
    for (const src of [k.data, v.data]) {
      for (let i = 0; i < b; i++) {
        const from = (i * seq + t) * run;
        dst.set(src.subarray(from, from + run), o);
        o += run;
      }
    }
  }
}

/** src [N, 2, b, Hkv*D] -> k, v [b, tokens, Hkv, D] (the first `tokens` rows). */
function splitKV(src: Float32Array, k: F32, v: F32, tokens: number): void {
  const [b, seq, kvHeads, d] = k.shape as unknown as [number, number, number, number];
  const run = kvHeads * d;
  let o = 0;
  for (let t = 0; t < tokens; t++) {
    for (const dst of [k.data, v.data]) {
      for (let i = 0; i < b; i++) {
        dst.set(src.subarray(o, o + run), (i * seq + t) * run);
        o += run;
      }
    }
  }
}
