/**
 * HybridAttention: Ulysses inside groups of u ranks, ring attention across
 * the r groups (P = u x r; USP / yunchang, LoongTrain's 2D attention,
 * Megatron-Core's a2a+p2p). SP rank p = g·u + i is rank i of Ulysses group g
 * (ranks g·u .. g·u + u − 1, consecutive) and rank g of ring group i (ranks
 * i, i + u, ..., strided), as `splitWorld(spGroup, { sp: u, dp: r })` builds
 * them. Per rank (s_p its tokens, S_g = the tokens of its Ulysses group, h_i
 * and k_i its query and kv heads from the head routing over u ranks):
 *
 *   q [b, s_p, H, D], k, v [b, s_p, Hkv, D]
 *   seqToHeads over the Ulysses group (q, k, v in one all-to-all)
 *   q [b, S_g, h_i, D], k, v [b, S_g, k_i, D]
 *   RingAttention over the ring group, on the groups' tokens
 *   out [b, S_g, h_i, D]
 *   headsToSeq over the Ulysses group
 *   out [b, s_p, H, D]
 *
 * Backward is the same three steps reversed (replicated kv heads' gradients
 * summed in the last exchange, as in UlyssesAttention). The head rules are
 * Ulysses' over u ranks (uneven heads and kv-head replication included).
 * The sequence layout must keep each Ulysses group's tokens in sequence
 * order (rank g·u + i's runs before rank g·u + i + 1's): `shardRuns(N, P,
 * "zigzag", r)` balances the causal ring over the r groups, "contiguous"
 * does not. u = 1 is ring attention, r = 1 Ulysses, on the same code path.
 *
 * Bytes sent per rank: the Ulysses all-to-all of UlyssesAttention over u
 * ranks on S_g tokens, plus RingAttention's over r ranks with its blocks
 * [b, S_g', k_i, D] (`hybridBytes`).
 */
import { checkGradShape, exclusive } from "@ulysses/block";
import type { ProcessGroup } from "@ulysses/collectives";
import type { AttentionGradients, LocalAttention } from "@ulysses/kernels";
import type { Tensor } from "@ulysses/tensors";
import { ParallelError } from "./errors.js";
import { ScratchBuffers } from "./head-exchange.js";
import { checkHeads, headRouting, type HeadRouting } from "./head-routing.js";
import { RingAttention, type RingAttentionOptions, type RingContext } from "./ring-attention.js";
import { aroundHeads, aroundHeadsBackward, checkChunkBytes, EXCHANGE_CHUNK_BYTES, type SeqExchange } from "./seq-all-to-all.js";
import type { UlyssesAttentionOptions } from "./ulysses-attention.js";
import { joinRuns, sequenceShards, type SequenceRun, type SequenceShards } from "./sequence-shards.js";
import { shardDims, type ShardedAttention, type ShardedAttentionForward, type ShardedAttentionOptions } from "./sharded-attention.js";
import { TensorPool } from "./tensor-pool.js";

type F32 = Tensor<"float32">;

/** What hybrid forward keeps: the ring's context (on the head-scattered q, k, v) and the Ulysses group's routing and shards. */
export class HybridContext {
  released = false;

  constructor(
    readonly owner: HybridAttention,
    readonly ring: RingContext,
    readonly routing: HeadRouting,
    readonly shards: SequenceShards,
  ) {}

  get savedBytes(): number {
    return this.ring.savedBytes;
  }
}

export class HybridAttention implements ShardedAttention<HybridContext> {
  readonly name: string;
  busy = false;
  readonly ring: RingAttention;
  private readonly scratch = new ScratchBuffers();
  private readonly pool = new TensorPool();
  private readonly chunkBytes: number;

  /** `group`: the SP group (P = u·r ranks); `ulyssesGroup` and `ringGroup`: this rank's subgroups of it (see the module comment). */
  constructor(
    readonly local: LocalAttention,
    readonly group: ProcessGroup,
    readonly ulyssesGroup: ProcessGroup,
    readonly ringGroup: ProcessGroup,
    options: RingAttentionOptions & UlyssesAttentionOptions = {},
  ) {
    const u = ulyssesGroup.size;
    const r = ringGroup.size;
    if (u * r !== group.size || group.rank !== ringGroup.rank * u + ulyssesGroup.rank) {
      throw new ParallelError(
        `HybridAttention: rank ${group.rank} of ${group.size} must be rank ${ringGroup.rank} of a ring of ${r} and rank ${ulyssesGroup.rank} of a Ulysses group of ${u} ` +
          `with P = u x r and p = ring rank * u + Ulysses rank (build them with splitWorld(group, { sp: u, dp: r }))`,
      );
    }
    this.ring = new RingAttention(local, ringGroup, options);
    this.name = `hybrid(${local.name}, ulysses ${u} x ring ${r})`;
    this.chunkBytes = checkChunkBytes(options.exchangeChunkBytes ?? EXCHANGE_CHUNK_BYTES, `${this.name} exchangeChunkBytes`);
  }

  checkHeads(heads: number, kvHeads: number): void {
    checkHeads(heads, kvHeads, this.ulyssesGroup.size);
  }

  /** The Ulysses group's shards (its ranks' sizes) and the ring's runs (each group's tokens joined), from the SP layout. */
  private split(shards: SequenceShards): { group: SequenceShards; ringRuns: SequenceRun[][] } {
    const u = this.ulyssesGroup.size;
    const g = this.ringGroup.rank;
    const ringRuns: SequenceRun[][] = [];
    for (let j = 0; j < this.ringGroup.size; j++) {
      const members = shards.runs.slice(j * u, j * u + u);
      const joined = joinRuns(members);
      for (let i = 1; i < joined.length; i++) {
        if (joined[i]!.start < joined[i - 1]!.start)
          throw new ParallelError(
            `${this.name}: Ulysses group ${j}'s tokens are not in sequence order; use shardRuns(N, P, layout, ringDegree ${this.ringGroup.size})`,
          );
      }
      ringRuns.push(joined);
    }
    const sizes = shards.sizes.slice(g * u, g * u + u);
    const starts: number[] = [];
    let total = 0;
    for (const n of sizes) {
      starts.push(total);
      total += n;
    }
    return { group: { length: total, sizes, starts, runs: shards.runs.slice(g * u, g * u + u) }, ringRuns };
  }

  private exchange(routing: HeadRouting, shards: SequenceShards): SeqExchange {
    return { group: this.ulyssesGroup, routing, shards, scratch: this.scratch, pool: this.pool, chunkBytes: this.chunkBytes };
  }

  async forward(q: F32, k: F32, v: F32, options: ShardedAttentionOptions): Promise<ShardedAttentionForward<HybridContext>> {
    const { seq: s, heads, kvHeads } = shardDims(q, k, v, this.name);
    this.checkHeads(heads, kvHeads);
    const routing = headRouting(heads, kvHeads, this.ulyssesGroup.size);
    const { group, ringRuns } = this.split(sequenceShards(s, this.group.rank, this.group.size, options));
    return exclusive(this, async () => {
      const ringOptions: ShardedAttentionOptions = { causal: options.causal, seqRuns: ringRuns };
      if (options.scale !== undefined) ringOptions.scale = options.scale;
      if (options.sequenceDocuments !== undefined) ringOptions.sequenceDocuments = options.sequenceDocuments;
      return aroundHeads(this.exchange(routing, group), q, k, v, async (qh, kh, vh) => {
        const ring = await this.ring.forward(qh, kh, vh, ringOptions);
        return { out: ring.out, context: new HybridContext(this, ring.context, routing, group) };
      });
    });
  }

  async backward(context: HybridContext, dOut: F32): Promise<AttentionGradients> {
    if (!(context instanceof HybridContext) || context.owner !== this || context.released)
      throw new ParallelError(`${this.name}: backward needs the (unreleased) context its own forward returned`);
    const { routing, shards } = context;
    const [b, , , d] = context.ring.q.shape as unknown as [number, number, number, number];
    checkGradShape(dOut, [b, shards.sizes[this.ulyssesGroup.rank]!, routing.heads, d], this.name);
    return exclusive(this, async () => {
      return aroundHeadsBackward(this.exchange(routing, shards), dOut, (dOutH) => this.ring.backward(context.ring, dOutH));
    });
  }

  release(context: HybridContext, ...tensors: F32[]): void {
    if (context.owner !== this || context.released) return;
    context.released = true;
    const { q, k, v } = context.ring;
    this.ring.release(context.ring);
    this.pool.give(q, k, v, ...tensors);
  }
}
