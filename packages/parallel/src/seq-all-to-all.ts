/**
 * The reversible Ulysses all-to-all (DeepSpeed's `_SeqAllToAll`): moves
 * tensors between the two layouts of a sequence-parallel group in ONE
 * exchange, however many tensors there are. Per rank r (b batch, s_j = rank
 * j's tokens, N = all tokens, Hx = the tensor's heads, hx_j = rank j's share
 * of them from the head routing):
 *
 *   sequence layout  [b, s_r, Hx, D]    this rank's tokens, all heads
 *   heads layout     [b, N, hx_r, D]    all tokens, this rank's heads
 *
 *   "sequence-to-heads": sequence layout -> heads layout
 *   "heads-to-sequence": heads layout -> sequence layout (the exact inverse)
 *
 * Both directions are the one function below with the two layouts' roles
 * swapped: the block rank r sends rank j in one direction is the block it
 * receives from rank j in the other, so the backward of each direction is
 * the other direction. A tensor names its head set: "q" (query heads,
 * contiguous ranges `routing.q`) or "kv" (`routing.kv`, whose lists may
 * repeat a head across ranks and within one: GQA with kvHeads < P or
 * uneven ranges). Heads-to-sequence writes each received copy of a head over
 * the last one (the copies of a forward tensor are equal), or, with
 * `accumulate`, sums the copies into a zeroed output: the gradient of a
 * replicated kv head (where no head is held twice, there is one copy of each
 * and `accumulate` writes it, as without).
 *
 * Wire layout: per destination rank, the tensors' blocks back to back in
 * the order given, each block token-major (`head-exchange.ts`). A rank's own
 * block (its tokens of its heads) does not travel: it is copied straight
 * from the input to the output. Send and receive floats live in reused
 * ScratchBuffers; outputs come from a
 * TensorPool (zeroed only where they accumulate). With `chunkBytes` the
 * exchange runs as several all-to-alls, each over a window of every rank's
 * tokens, so those buffers stay a few MiB at any sequence length.
 */
import type { ProcessGroup } from "@ulysses/collectives";
import { Tensor } from "@ulysses/tensors";
import { ParallelError } from "./errors.js";
import { gatherHeads, readSeqBlock, scatterHeads, ScratchBuffers, type TokenWindow, writeSeqBlock } from "./head-exchange.js";
import type { HeadRouting } from "./head-routing.js";
import type { SequenceShards } from "./sequence-shards.js";
import { TensorPool } from "./tensor-pool.js";

type F32 = Tensor<"float32">;

export type SeqAllToAllDirection = "sequence-to-heads" | "heads-to-sequence";

/** Which routing a tensor's heads follow: the query heads (`routing.q`) or the kv heads (`routing.kv`). */
export type HeadSet = "q" | "kv";

/** One tensor of an exchange. */
export interface SeqAllToAllPart {
  readonly tensor: F32;
  readonly heads: HeadSet;
  /** Heads-to-sequence only: sum the copies of replicated heads into a zeroed output (gradients of shared kv heads). */
  readonly accumulate?: boolean;
}

/**
 * The send and receive areas of an exchange in chunks (UlyssesAttention,
 * HybridAttention): at most about 4 MiB each, whatever the sequence length.
 */
export const EXCHANGE_CHUNK_BYTES = 4 * 1024 * 1024;

/** Checks a chunk size (`SeqExchange.chunkBytes`, the attentions' `exchangeChunkBytes`): a positive integer, or a ParallelError naming it. */
export function checkChunkBytes(value: number, who: string): number {
  if (!Number.isInteger(value) || value < 1) throw new ParallelError(`${who}: the exchange chunk size must be a positive integer of bytes, got ${value}`);
  return value;
}

/** Where an exchange runs: the group, its head routing and sequence shards, and the reusable buffers. */
export interface SeqExchange {
  readonly group: ProcessGroup;
  readonly routing: HeadRouting;
  readonly shards: SequenceShards;
  /** Send/receive buffers ("send", "recv" slots), reused across calls; default: fresh ones. */
  readonly scratch?: ScratchBuffers;
  /** Where the outputs come from; default: fresh tensors. */
  readonly pool?: TensorPool;
  /**
   * Run the exchange as several all-to-alls, each over a window of every
   * rank's tokens, so that its send and receive areas hold at most about
   * this many bytes (default: one all-to-all, areas as large as the
   * tensors). Every rank works out the same number of chunks from the
   * shards and routing; exchanges in chunks must be issued one at a time on
   * the group (a second exchange started before the first resolves could
   * interleave its chunks differently on different ranks).
   */
  readonly chunkBytes?: number;
}

/** One output tensor per part, in order. */
export type SeqAllToAllOutputs<T extends readonly SeqAllToAllPart[]> = { -readonly [K in keyof T]: F32 };

/** What both directions need to know about one part. */
interface PartPlan {
  readonly tensor: F32;
  readonly accumulate: boolean;
  /** Global head indices of the tensor held by each rank in the heads layout. */
  readonly headsOf: readonly (readonly number[])[];
  /** The tensor's total heads Hx (its sequence-layout head axis). */
  readonly totalHeads: number;
}

/** The window of every rank's tokens (of its s_j) that one chunk of an exchange moves, by rank. */
type Windows = readonly TokenWindow[];

/**
 * One side of the exchange: the local shape of a part in this layout, the
 * rows (head vectors of D floats) of the block exchanged with rank j for the
 * token windows `w`, and how to pack that block from a tensor or unpack it
 * into one.
 */
interface Layout {
  readonly name: string;
  shape(part: PartPlan, b: number, d: number): number[];
  rows(part: PartPlan, j: number, b: number, w: Windows): number;
  pack(part: PartPlan, tensor: F32, j: number, dst: Float32Array, offset: number, w: Windows): number;
  unpack(part: PartPlan, src: Float32Array, offset: number, tensor: F32, j: number, w: Windows): number;
}

/** Batch row i of [b, ...] as a [1, ...] view of the same memory. */
function batchRow(t: F32, i: number): F32 {
  const per = t.size / t.shape[0]!;
  return new Tensor("float32", [1, ...t.shape.slice(1)], t.data.subarray(i * per, (i + 1) * per));
}

/**
 * The block this rank keeps (its own tokens of its own heads, the windows'
 * share), moved straight from the source tensor into the output: one copy,
 * where the send buffer, the backend and the receive buffer would take three.
 * `sequence` is the tensor in the sequence layout [b, s_r, Hx, D], `heads`
 * the one in the heads layout [b, N, hx_r, D]; `toHeads` says which is the
 * output. Per batch row, the heads side's rows of this rank's window are one
 * run, as gatherHeads writes and scatterHeads reads a send or receive block.
 */
function moveOwnBlock(part: PartPlan, sequence: F32, heads: F32, toHeads: boolean, rank: number, shards: SequenceShards, w: Windows): void {
  const [b, n, hr, d] = heads.shape as unknown as [number, number, number, number];
  const window = w[rank]!;
  for (let i = 0; i < b; i++) {
    const offset = (i * n + shards.starts[rank]! + window.first) * hr * d;
    if (toHeads) gatherHeads(batchRow(sequence, i), part.headsOf[rank]!, heads.data, offset, window);
    else scatterHeads(heads.data, offset, batchRow(sequence, i), part.headsOf[rank]!, part.accumulate, window);
  }
}

/** Whether two arrays share any bytes. */
function overlap(a: Float32Array, b: Float32Array): boolean {
  return a.buffer === b.buffer && a.byteOffset < b.byteOffset + b.byteLength && b.byteOffset < a.byteOffset + a.byteLength;
}

/** [b, s_r, Hx, D]: the block for rank j holds rank j's heads of this rank's tokens (its window), [b, w_r, hx_j, D]. */
function sequenceLayout(rank: number, shards: SequenceShards): Layout {
  const s = shards.sizes[rank]!;
  return {
    name: "sequence",
    shape: (part, b, d) => [b, s, part.totalHeads, d],
    rows: (part, j, b, w) => b * w[rank]!.count * part.headsOf[j]!.length,
    // [b, s_r, Hx, D] -> [b, w_r, hx_j, D]
    pack: (part, tensor, j, dst, offset, w) => gatherHeads(tensor, part.headsOf[j]!, dst, offset, w[rank]),
    // [b, w_r, hx_j, D] -> heads hx_j of [b, s_r, Hx, D] (set, or add when accumulating)
    unpack: (part, src, offset, tensor, j, w) => scatterHeads(src, offset, tensor, part.headsOf[j]!, part.accumulate, w[rank]),
  };
}

/** [b, N, hx_r, D]: the block for rank j holds rank j's tokens (its window) of this rank's heads, [b, w_j, hx_r, D]. */
function headsLayout(rank: number, shards: SequenceShards): Layout {
  return {
    name: "heads",
    shape: (part, b, d) => [b, shards.length, part.headsOf[rank]!.length, d],
    rows: (part, j, b, w) => b * w[j]!.count * part.headsOf[rank]!.length,
    // [b, N, hx_r, D] -> tokens [t_j + first_j, + count_j): [b, w_j, hx_r, D]
    pack: (_part, tensor, j, dst, offset, w) => readSeqBlock(tensor, shards.starts[j]! + w[j]!.first, w[j]!.count, dst, offset),
    // [b, w_j, hx_r, D] -> those tokens of [b, N, hx_r, D]
    unpack: (_part, src, offset, tensor, j, w) => writeSeqBlock(src, offset, tensor, shards.starts[j]! + w[j]!.first, w[j]!.count),
  };
}

/**
 * How many all-to-alls an exchange runs (`SeqExchange.chunkBytes`): enough
 * that the largest send or receive area of any rank fits, at most the
 * fewest tokens a rank holds (each chunk moves a window of every rank's).
 * Every rank computes it from the same shards and routing: the same count.
 */
function chunkCount(exchange: SeqExchange, plans: readonly PartPlan[], b: number, d: number): number {
  const { chunkBytes, shards } = exchange;
  if (chunkBytes === undefined) return 1;
  checkChunkBytes(chunkBytes, "seqAllToAll chunkBytes");
  let largest = 0; // floats
  shards.sizes.forEach((s, r) => {
    const sequenceSide = sum(plans.map((p) => b * s * sum(p.headsOf.map((heads) => heads.length))));
    const headsSide = sum(plans.map((p) => b * shards.length * p.headsOf[r]!.length));
    largest = Math.max(largest, sequenceSide, headsSide);
  });
  return Math.max(1, Math.min(Math.ceil((largest * d * 4) / chunkBytes), ...shards.sizes));
}

/** Chunk c of `chunks`: tokens [floor(c s_j / chunks), floor((c + 1) s_j / chunks)) of every rank j's s_j. */
function chunkWindows(shards: SequenceShards, c: number, chunks: number): Windows {
  return shards.sizes.map((s) => {
    const first = Math.floor((c * s) / chunks);
    return { first, count: Math.floor(((c + 1) * s) / chunks) - first };
  });
}

/** Global head lists per rank for a head set (query ranges expanded). */
function headLists(routing: HeadRouting, heads: HeadSet): readonly (readonly number[])[] {
  if (heads === "kv") return routing.kv;
  return routing.q.map((range) => Array.from({ length: range.count }, (_, i) => range.start + i));
}

function shapeText(shape: readonly number[]): string {
  return `[${shape.join(", ")}]`;
}

function sum(values: readonly number[]): number {
  let total = 0;
  for (const v of values) total += v;
  return total;
}

/** Checks the group against the routing and shards, and every part against the source layout; returns b, D and the plans. */
function plan(direction: SeqAllToAllDirection, exchange: SeqExchange, parts: readonly SeqAllToAllPart[], from: Layout) {
  const { group, routing, shards } = exchange;
  const who = `seqAllToAll(${direction})`;
  if (routing.worldSize !== group.size || shards.sizes.length !== group.size) {
    throw new ParallelError(
      `${who}: group of ${group.size} ranks, head routing for ${routing.worldSize}, sequence shards for ${shards.sizes.length} (all must agree)`,
    );
  }
  if (parts.length === 0) throw new ParallelError(`${who}: needs at least one tensor`);
  const first = parts[0]!.tensor;
  if (first.rank !== 4) throw new ParallelError(`${who}: tensors must be [batch, seq, heads, headDim], got ${shapeText(first.shape)}`);
  const [b, , , d] = first.shape as unknown as [number, number, number, number];
  return parts.map((part, index): PartPlan => {
    if (part.accumulate === true && direction === "sequence-to-heads") {
      throw new ParallelError(`${who}: part ${index} asks to accumulate, which only heads-to-sequence does (sequence-to-heads never receives a head twice)`);
    }
    const planned: PartPlan = {
      tensor: part.tensor,
      // query heads are never replicated, kv heads only where the routing says so: where each head is held once, every
      // output float is written by exactly one copy, so no zeroed output and no sums
      accumulate: part.accumulate === true && part.heads === "kv" && routing.replicatedKv,
      headsOf: headLists(routing, part.heads),
      totalHeads: part.heads === "q" ? routing.heads : routing.kvHeads,
    };
    const expected = from.shape(planned, b, d);
    const shape = part.tensor.shape;
    if (part.tensor.dtype !== "float32" || shape.length !== 4 || shape.some((n, i) => n !== expected[i])) {
      throw new ParallelError(
        `${who}: part ${index} (${part.heads} heads) on rank ${group.rank} must be float32 ${shapeText(expected)} in the ${from.name} layout, ` +
          `got ${part.tensor.dtype} ${shapeText(shape)}`,
      );
    }
    return planned;
  });
}

/**
 * Moves `parts` from one layout to the other in one all-to-all; resolves with
 * one output per part, in order (from the exchange's pool). The inputs are
 * not modified; they may be released once this resolves.
 */
export async function seqAllToAll<const T extends readonly SeqAllToAllPart[]>(
  direction: SeqAllToAllDirection,
  exchange: SeqExchange,
  parts: T,
): Promise<SeqAllToAllOutputs<T>> {
  const { group, shards } = exchange;
  const sequence = sequenceLayout(group.rank, shards);
  const heads = headsLayout(group.rank, shards);
  const [from, to] = direction === "sequence-to-heads" ? [sequence, heads] : [heads, sequence];
  const plans = plan(direction, exchange, parts, from);
  const [b, , , d] = parts[0]!.tensor.shape as unknown as [number, number, number, number];
  const scratch = exchange.scratch ?? new ScratchBuffers();
  const pool = exchange.pool ?? new TensorPool();
  const ranks = Array.from({ length: group.size }, (_, j) => j);
  const chunks = chunkCount(exchange, plans, b, d);
  const outputs = plans.map((p) => pool.take(to.shape(p, b, d), p.accumulate));
  // the own block is copied from the inputs after others have been written to the outputs
  for (const out of outputs) {
    if (plans.some((p) => overlap(p.tensor.data, out.data))) throw new ParallelError(`seqAllToAll(${direction}): an output shares memory with an input`);
  }
  const toHeads = direction === "sequence-to-heads";
  for (let c = 0; c < chunks; c++) {
    const w = chunkWindows(shards, c, chunks);
    // Rows per peer j: what this rank sends j in the source layout is what j receives from it in the target layout.
    // None to itself: its own block moves straight from input to output (moveOwnBlock).
    const rowsTo = (layout: Layout, j: number) => (j === group.rank ? 0 : sum(plans.map((p) => layout.rows(p, j, b, w))));
    const inputSplits = ranks.map((j) => rowsTo(from, j));
    const outputSplits = ranks.map((j) => rowsTo(to, j));

    // Per peer j, each part's block back to back: [rows_j, D].
    const send = scratch.get("send", sum(inputSplits) * d);
    let o = 0;
    for (const j of ranks) if (j !== group.rank) for (const p of plans) o = from.pack(p, p.tensor, j, send, o, w);

    const rows = sum(outputSplits);
    const output = new Tensor("float32", [rows, d], scratch.get("recv", rows * d));
    const input = new Tensor("float32", [sum(inputSplits), d], send);
    const received = (await group.allToAll(input, { inputSplits, outputSplits, output })).data as Float32Array;

    // Per source j, each part's block -> its place in the target-layout output (in rank order, the order
    // replicated heads' copies are summed in).
    o = 0;
    for (const j of ranks) {
      for (let i = 0; i < plans.length; i++) {
        const p = plans[i]!;
        if (j !== group.rank) o = to.unpack(p, received, o, outputs[i]!, j, w);
        else if (toHeads) moveOwnBlock(p, p.tensor, outputs[i]!, true, j, shards, w);
        else moveOwnBlock(p, outputs[i]!, p.tensor, false, j, shards, w);
      }
    }
  }
  return outputs as unknown as SeqAllToAllOutputs<T>;
}

/** Sequence layout [b, s_r, Hx, D] -> heads layout [b, N, hx_r, D], every part in one all-to-all. */
export function seqToHeads<const T extends readonly SeqAllToAllPart[]>(exchange: SeqExchange, parts: T): Promise<SeqAllToAllOutputs<T>> {
  return seqAllToAll("sequence-to-heads", exchange, parts);
}

/** Heads layout [b, N, hx_r, D] -> sequence layout [b, s_r, Hx, D] (the inverse of seqToHeads; `accumulate` sums replicated heads). */
export function headsToSeq<const T extends readonly SeqAllToAllPart[]>(exchange: SeqExchange, parts: T): Promise<SeqAllToAllOutputs<T>> {
  return seqAllToAll("heads-to-sequence", exchange, parts);
}

/**
 * Ulysses around an inner attention on the heads layout: q, k, v to heads in
 * one exchange, `inner`, its out back to the sequence layout. The inner
 * result's out stays valid (kept for backward); only the exchanged copy is returned.
 */
export async function aroundHeads<C>(
  exchange: SeqExchange,
  q: F32,
  k: F32,
  v: F32,
  inner: (q: F32, k: F32, v: F32) => Promise<{ out: F32; context: C }>,
): Promise<{ out: F32; context: C }> {
  // one rank holds every token and head: the exchanges would only copy q, k, v and out
  if (exchange.group.size === 1) return inner(q, k, v);
  // q [b, s_r, H, D], k, v [b, s_r, Hkv, D] -> q [b, N, h_r, D], k, v [b, N, k_r, D]
  const [qh, kh, vh] = await seqToHeads(exchange, [
    { tensor: q, heads: "q" },
    { tensor: k, heads: "kv" },
    { tensor: v, heads: "kv" },
  ]);
  const result = await inner(qh, kh, vh);
  // out [b, N, h_r, D] -> [b, s_r, H, D]
  const [out] = await headsToSeq(exchange, [{ tensor: result.out, heads: "q" }]);
  return { out, context: result.context };
}

/** The backward of `aroundHeads`: dOut to heads, `inner`, dq, dk, dv back (gradients of replicated kv heads summed). */
export async function aroundHeadsBackward(
  exchange: SeqExchange,
  dOut: F32,
  inner: (dOut: F32) => Promise<{ dq: F32; dk: F32; dv: F32 }>,
): Promise<{ dq: F32; dk: F32; dv: F32 }> {
  if (exchange.group.size === 1) return inner(dOut);
  // dOut [b, s_r, H, D] -> [b, N, h_r, D] (the inverse of forward's last exchange)
  const [dOutH] = await seqToHeads(exchange, [{ tensor: dOut, heads: "q" }]);
  const grads = await inner(dOutH);
  exchange.pool?.give(dOutH);
  // dq [b, N, h_r, D], dk, dv [b, N, k_r, D] -> dq [b, s_r, H, D], dk, dv [b, s_r, Hkv, D]
  const [dq, dk, dv] = await headsToSeq(exchange, [
    { tensor: grads.dq, heads: "q" },
    { tensor: grads.dk, heads: "kv", accumulate: true },
    { tensor: grads.dv, heads: "kv", accumulate: true },
  ]);
  return { dq, dk, dv };
}
