/**
 * A toy sequence-parallel scheme, the whole of it in this one file: every
 * rank all-gathers q, k and v over the SP group, runs the local kernel on the
 * whole sequence and keeps its own rows of the output; backward all-gathers
 * dOut, runs the local backward on the whole sequence and keeps its own rows
 * of dq, dk and dv. Every rank computes the full attention (wasteful, and
 * exact), so it is a test of the scheme registry, not a scheme to use.
 * Contiguous layout only; no packed documents.
 */
import type { BlockAttentionContext } from "@ulysses/block";
import type { ProcessGroup } from "@ulysses/collectives";
import type { AttentionGradients, AttentionOptions, LocalAttention } from "@ulysses/kernels";
import {
  isContiguous,
  sequenceShards,
  type SequenceParallelScheme,
  type SequenceShards,
  type ShardedAttention,
  type ShardedAttentionOptions,
} from "@ulysses/parallel";
import { Tensor } from "@ulysses/tensors";

type F32 = Tensor<"float32">;

interface ReplicatedContext extends BlockAttentionContext {
  q: F32;
  k: F32;
  v: F32;
  out: F32;
  logSumExp: F32;
  shards: SequenceShards;
  options: AttentionOptions;
}

/** [b, s, h, d] -> rows [s, b * h * d], one row per token, for a gather along the sequence. */
function toRows(x: F32): F32 {
  const [b, s, h, d] = x.shape as [number, number, number, number];
  const rows = new Tensor("float32", [s, b * h * d]);
  for (let t = 0; t < s; t++) for (let i = 0; i < b; i++) rows.data.set(x.data.subarray((i * s + t) * h * d, (i * s + t + 1) * h * d), (t * b + i) * h * d);
  return rows;
}

/** rows [n, b * h * d] -> [b, n, h, d] */
function fromRows(rows: F32, b: number, h: number, d: number): F32 {
  const n = rows.shape[0]!;
  const x = new Tensor("float32", [b, n, h, d]);
  for (let t = 0; t < n; t++) for (let i = 0; i < b; i++) x.data.set(rows.data.subarray((t * b + i) * h * d, (t * b + i + 1) * h * d), (i * n + t) * h * d);
  return x;
}

/** Tokens [start, start + length) of [b, n, h, d]. */
function slice(x: F32, start: number, length: number): F32 {
  const [b, n, h, d] = x.shape as [number, number, number, number];
  const y = new Tensor("float32", [b, length, h, d]);
  for (let i = 0; i < b; i++) y.data.set(x.data.subarray((i * n + start) * h * d, (i * n + start + length) * h * d), i * length * h * d);
  return y;
}

class ReplicatedAttention implements ShardedAttention<ReplicatedContext> {
  readonly name: string;

  constructor(
    readonly local: LocalAttention,
    readonly group: ProcessGroup,
  ) {
    this.name = `replicated(${local.name}, P=${group.size})`;
  }

  checkHeads(heads: number, kvHeads: number): void {
    if (heads % kvHeads !== 0) throw new Error(`${this.name}: heads ${heads} must be a multiple of kvHeads ${kvHeads}`);
  }

  private async gather(x: F32, shards: SequenceShards): Promise<F32> {
    const [b, , h, d] = x.shape as [number, number, number, number];
    const output = new Tensor("float32", [shards.length, b * h * d]);
    await this.group.allGather(toRows(x), { sizes: shards.sizes, output });
    return fromRows(output, b, h, d);
  }

  async forward(q: F32, k: F32, v: F32, options: ShardedAttentionOptions) {
    if (options.sequenceDocuments !== undefined) throw new Error(`${this.name}: packed documents are not supported`);
    const shards = sequenceShards(q.shape[1]!, this.group.rank, this.group.size, options);
    if (!isContiguous(shards)) throw new Error(`${this.name}: needs the contiguous layout`);
    const [qAll, kAll, vAll] = [await this.gather(q, shards), await this.gather(k, shards), await this.gather(v, shards)];
    const localOptions: AttentionOptions = { causal: options.causal, scale: options.scale };
    const { out, logSumExp } = await this.local.forward(qAll, kAll, vAll, localOptions);
    const context: ReplicatedContext = { q: qAll, k: kAll, v: vAll, out, logSumExp, shards, options: localOptions, savedBytes: 0, keeps: () => false };
    const start = shards.starts[this.group.rank]!;
    return { out: slice(out, start, q.shape[1]!), context };
  }

  async backward(context: ReplicatedContext, dOut: F32): Promise<AttentionGradients> {
    const { shards } = context;
    const dAll = await this.gather(dOut, shards);
    const g = await this.local.backward(context.q, context.k, context.v, context.out, dAll, context.logSumExp, context.options);
    const start = shards.starts[this.group.rank]!;
    const s = dOut.shape[1]!;
    return { dq: slice(g.dq, start, s), dk: slice(g.dk, start, s), dv: slice(g.dv, start, s) };
  }

  release(): void {}
}

/** The descriptor: no degrees of its own (u = sp, every rank runs every head), no subgroups. */
export const replicatedScheme: SequenceParallelScheme = {
  name: "replicated",
  settings: [],
  resolve: (options) => ({ ulyssesDegree: options.sp, ringDegree: 1 }),
  problems: () => [],
  headRanks: () => 1,
  create: (local, { group }) => new ReplicatedAttention(local, group),
  // q, k, v and dOut gathered: each rank sends its rows to every other rank
  bytes: ({ sizes, rank, batch, heads, kvHeads, headDim }) => {
    const others = sizes.length - 1;
    const rowFloats = batch * headDim;
    return { forward: 4 * others * sizes[rank]! * rowFloats * (heads + 2 * kvHeads), backward: 4 * others * sizes[rank]! * rowFloats * heads };
  },
  memory: ({ sp, kvHeads, headDim }) => ({ kvWidth: kvHeads * headDim * sp, exchangeAreas: false, travels: 1, chunked: false }),
  describe: () => "replicated attention",
};
