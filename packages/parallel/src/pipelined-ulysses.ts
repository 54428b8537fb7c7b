/**
 * PipelinedUlyssesAttention: Ulysses with its exchanges overlapped with the
 * local kernel by head-group pipelining. The heads are cut into G groups
 * (G divides heads and kvHeads; each group keeps heads / G query heads and
 * their kvHeads / G kv heads, so grouped-query attention stays within a
 * group); group g + 1's sequence-to-heads all-to-all is posted before group
 * g's local kernel runs, and group g's output goes back while group g + 1
 * computes:
 *
 *   in(0) | in(1) ‖ local(0) | out(0) ‖ in(2) ‖ local(1) | ... | out(G − 1)
 *
 * Backward pipelines the same way: dOut(g + 1) to heads while group g's
 * local backward runs, dq, dk, dv of group g back while g + 1 computes. The
 * kernel runs off the JS thread, so a posted exchange proceeds meanwhile.
 * Every rank posts the exchanges in the same order (none depends on timing).
 * Each group's exchange is UlyssesAttention's on heads / G and kvHeads / G
 * heads (`ulyssesBytes` with that routing, times G); G = 1 is Ulysses.
 * Every group needs at least one query head per rank: heads / G >= P.
 */
import { checkGradShape, exclusive, SavedLocalAttention, type BlockAttentionContext } from "@ulysses/block";
import type { ProcessGroup } from "@ulysses/collectives";
import type { AttentionGradients, AttentionOptions, LocalAttention } from "@ulysses/kernels";
import { narrow, type Tensor } from "@ulysses/tensors";
import { ParallelError } from "./errors.js";
import { ScratchBuffers } from "./head-exchange.js";
import { checkHeads, headRouting, type HeadRouting } from "./head-routing.js";
import { headsToSeq, seqToHeads, type SeqExchange } from "./seq-all-to-all.js";
import { joinRuns, sequenceShards, type SequenceShards } from "./sequence-shards.js";
import { documentSlice, shardDims, type ShardedAttention, type ShardedAttentionForward, type ShardedAttentionOptions } from "./sharded-attention.js";
import { TensorPool } from "./tensor-pool.js";

type F32 = Tensor<"float32">;
type Part = SavedLocalAttention<null>;

/** What forward keeps: each chunk's local call (head-scattered q, k, v, out, lse). */
export class PipelinedUlyssesContext implements BlockAttentionContext {
  released = false;

  constructor(
    readonly owner: PipelinedUlyssesAttention,
    readonly parts: readonly Part[],
    readonly routing: HeadRouting,
    readonly shards: SequenceShards,
    readonly heads: number,
    readonly kvHeads: number,
  ) {}

  get savedBytes(): number {
    return this.parts.reduce((n, p) => n + p.savedBytes, 0);
  }
}

export class PipelinedUlyssesAttention implements ShardedAttention<PipelinedUlyssesContext> {
  readonly name: string;
  busy = false;
  readonly chunks: number;
  /** One set of send/receive buffers per chunk and direction, so exchanges in flight never share one. */
  private readonly scratch: { in: ScratchBuffers; out: ScratchBuffers }[];
  private readonly pool = new TensorPool();

  constructor(
    readonly local: LocalAttention,
    readonly group: ProcessGroup,
    options: { chunks: number },
  ) {
    const g = options.chunks;
    if (!Number.isInteger(g) || g < 1) throw new ParallelError(`PipelinedUlyssesAttention: chunks must be a positive integer, got ${g}`);
    this.chunks = g;
    this.scratch = Array.from({ length: g }, () => ({ in: new ScratchBuffers(), out: new ScratchBuffers() }));
    this.name = `ulysses(${local.name}, P=${group.size}, ${g} chunks of heads pipelined)`;
  }

  checkHeads(heads: number, kvHeads: number): void {
    const g = this.chunks;
    if (heads % g !== 0 || kvHeads % g !== 0) throw new ParallelError(`${this.name}: ${g} chunks must divide heads (${heads}) and kvHeads (${kvHeads})`);
    checkHeads(heads / g, kvHeads / g, this.group.size);
  }

  private exchange(routing: HeadRouting, shards: SequenceShards, g: number, direction: "in" | "out"): SeqExchange {
    return { group: this.group, routing, shards, scratch: this.scratch[g]![direction], pool: this.pool };
  }

  async forward(q: F32, k: F32, v: F32, options: ShardedAttentionOptions): Promise<ShardedAttentionForward<PipelinedUlyssesContext>> {
    const { batch: b, seq: s, heads, kvHeads } = shardDims(q, k, v, this.name);
    this.checkHeads(heads, kvHeads);
    const routing = headRouting(heads / this.chunks, kvHeads / this.chunks, this.group.size);
    const shards = sequenceShards(s, this.group.rank, this.group.size, options);
    if (joinRuns(shards.runs).length !== 1) throw new ParallelError(`${this.name}: needs the contiguous sequence layout`);
    const ids = documentSlice(options.sequenceDocuments, b, shards.length, 0, shards.length, this.name);
    const localOptions: AttentionOptions = { causal: options.causal, scale: options.scale };
    if (ids !== null) localOptions.documents = { query: ids, key: ids };
    const G = this.chunks;
    const qPer = heads / G;
    const kvPer = kvHeads / G;
    return exclusive(this, async () => {
      const post = (g: number) =>
        seqToHeads(this.exchange(routing, shards, g, "in"), [
          { tensor: narrow(q, 2, g * qPer, qPer), heads: "q" },
          { tensor: narrow(k, 2, g * kvPer, kvPer), heads: "kv" },
          { tensor: narrow(v, 2, g * kvPer, kvPer), heads: "kv" },
        ]);
      const parts: Part[] = [];
      const outs: Promise<F32[]>[] = [];
      let incoming = post(0);
      for (let g = 0; g < G; g++) {
        const [qh, kh, vh] = await incoming;
        if (g + 1 < G) incoming = post(g + 1); // in flight while group g computes
        const local = await this.local.forward(qh!, kh!, vh!, localOptions);
        parts.push(new SavedLocalAttention(this, null, localOptions, qh!, kh!, vh!, local.out, local.logSumExp));
        outs.push(headsToSeq(this.exchange(routing, shards, g, "out"), [{ tensor: local.out, heads: "q" }]));
      }
      const out = this.pool.take([b, s, heads, q.shape[3]!], false);
      const pieces = await Promise.all(outs);
      pieces.forEach(([piece], g) => writeHeads(out, piece!, g * qPer));
      this.pool.give(...pieces.map(([piece]) => piece!));
      return { out, context: new PipelinedUlyssesContext(this, parts, routing, shards, heads, kvHeads) };
    });
  }

  async backward(context: PipelinedUlyssesContext, dOut: F32): Promise<AttentionGradients> {
    if (!(context instanceof PipelinedUlyssesContext) || context.owner !== this || context.released) {
      throw new ParallelError(`${this.name}: backward needs the (unreleased) context its own forward returned`);
    }
    const { routing, shards, heads, kvHeads, parts } = context;
    const [b, , , d] = parts[0]!.q.shape as unknown as [number, number, number, number];
    const s = shards.sizes[this.group.rank]!;
    checkGradShape(dOut, [b, s, heads, d], this.name);
    const G = this.chunks;
    const qPer = heads / G;
    const kvPer = kvHeads / G;
    return exclusive(this, async () => {
      const post = (g: number) => seqToHeads(this.exchange(routing, shards, g, "in"), [{ tensor: narrow(dOut, 2, g * qPer, qPer), heads: "q" }]);
      const backs: Promise<F32[]>[] = [];
      let incoming = post(0);
      for (let g = 0; g < G; g++) {
        const [dOutH] = await incoming;
        if (g + 1 < G) incoming = post(g + 1);
        const grads = await parts[g]!.localBackward(this.local, dOutH!);
        this.pool.give(dOutH!);
        backs.push(
          headsToSeq(this.exchange(routing, shards, g, "out"), [
            { tensor: grads.dq, heads: "q" },
            { tensor: grads.dk, heads: "kv", accumulate: true },
            { tensor: grads.dv, heads: "kv", accumulate: true },
          ]),
        );
      }
      const dq = this.pool.take([b, s, heads, d], false);
      const dk = this.pool.take([b, s, kvHeads, d], false);
      const dv = this.pool.take([b, s, kvHeads, d], false);
      const pieces = await Promise.all(backs);
      pieces.forEach(([pq, pk, pv], g) => {
        writeHeads(dq, pq!, g * qPer);
        writeHeads(dk, pk!, g * kvPer);
        writeHeads(dv, pv!, g * kvPer);
      });
      this.pool.give(...pieces.flat());
      return { dq, dk, dv };
    });
  }

  release(context: PipelinedUlyssesContext, ...tensors: F32[]): void {
    if (context.owner !== this || context.released) return;
    context.released = true;
    for (const p of context.parts) this.pool.give(p.q, p.k, p.v);
    this.pool.give(...tensors);
  }
}

/** dst [b, s, H, D] heads [start, start + h) = src [b, s, h, D]. */
function writeHeads(dst: F32, src: F32, start: number): void {
  const [b, s, heads, d] = dst.shape as unknown as [number, number, number, number];
  const h = src.shape[2]!;
  for (let t = 0; t < b * s; t++) dst.data.set(src.data.subarray(t * h * d, (t + 1) * h * d), (t * heads + start) * d);
}
