/**
 * One rank of `pnpm bench:schemes` (a threads-backend worker started by
 * `launch`). Measurements, each collective over the world (every rank calls
 * it with the same arguments):
 *
 * - `steps`: one causal TransformerBlock forward + backward per scheme row
 *   (Ulysses, ring, hybrid; each with its own ParallelDims, so the hybrid's
 *   Ulysses and ring subgroups are ProcessGroups of their own), the rows'
 *   timed steps interleaved (iteration i of every row, then i + 1) so that
 *   other work on the machine slows every row alike. Per step: the wall time
 *   (barrier, forward, backward, gradient all-reduce), the bytes this rank
 *   sent in the attention's collectives summed over the SP group and the
 *   hybrid subgroups (the gradient all-reduce apart), and the ring's compute
 *   and wait time (`RingAttention.stats`, reset before the step).
 * - `attentionRate`, `gemmRate`: the local attention kernel (causal forward +
 *   backward at the ring's block size) and the block's forward GEMMs, timed
 *   on every rank at once after a barrier, so each rank shares the cores as
 *   it does in a step.
 * - `p2p`: the ring's exchange pattern alone: every rank sends a message to
 *   r + 1 and receives one from r − 1 (even ranks send first), timed per
 *   exchange.
 *
 * Tables are made by the orchestrator (schemes-bench.ts).
 */
import { TransformerBlock } from "@ulysses/block";
import type { CommStats, OpKind, ProcessGroup } from "@ulysses/collectives";
import { FusedAttention } from "@ulysses/native-ops";
import { createOrtOps, OrtAttention, SessionCache, type LocalAttention } from "@ulysses/kernels";
import { commDelta } from "@ulysses/measure";
import {
  HybridAttention,
  ParallelBlock,
  ParallelDims,
  RingAttention,
  UlyssesAttention,
  type SequenceLayoutKind,
  type SequenceRun,
  type ShardedAttention,
} from "@ulysses/parallel";
import { randomUniform, Rng, Tensor } from "@ulysses/tensors";
import { blockGemm, timedRepeats, warmUp } from "./paper/block-gemm.js";

export type SchemeKind = "ulysses" | "ring" | "hybrid";
export type KernelKind = "fused" | "ort";

/** One row of the benchmark: a scheme, its sequence layout and degrees, and whether the ring overlaps transfers with compute. */
export interface SchemeRow {
  id: string;
  scheme: SchemeKind;
  layout: SequenceLayoutKind;
  /** Ulysses degree (ranks per Ulysses group). */
  u: number;
  /** Ring degree (groups around the ring). */
  r: number;
  overlap: boolean;
}

export interface BlockShape {
  hidden: number;
  heads: number;
  kvHeads: number;
  batch: number;
}

export interface StepsArgs {
  rows: SchemeRow[];
  seq: number;
  block: BlockShape;
  iters: number;
  warmups: number;
}

/** One rank's timed steps of one row (index i: timed step i). */
export interface RankSteps {
  stepMs: number[];
  /** Bytes sent in the attention's collectives (every group but the gradient all-reduce). */
  attentionBytes: number[];
  gradBytes: number[];
  /** Ring rows: RingAttention.stats of the step (ms); null for Ulysses. */
  computeMs: number[] | null;
  waitMs: number[] | null;
  calls: number[] | null;
}

export interface AttentionRateArgs {
  /** Queries and keys of the call (the ring's block: this rank's tokens). */
  seqQ: number;
  seqK: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  batch: number;
  causal: boolean;
  repeats: number;
}

export interface GemmRateArgs {
  rows: number;
  hidden: number;
  repeats: number;
}

export interface P2PArgs {
  bytes: number;
  /** Exchanges per round. */
  iters: number;
  rounds: number;
}

interface RankContext {
  rank: number;
  worldSize: number;
  group: ProcessGroup;
  ortThreads: number;
  args?: { kernel?: KernelKind };
}

/** The ops of the attention's exchanges: everything but the gradient all-reduce (and barriers, which move nothing). */
const ATTENTION_OPS: readonly OpKind[] = ["allToAll", "allGather", "reduceScatter", "broadcast", "send", "recv"];

/** What one row runs on this rank: the block, its groups (for the bytes) and the ring (for its stats). */
interface BuiltRow {
  block: ParallelBlock;
  groups: ProcessGroup[];
  ring: RingAttention | null;
  runs: SequenceRun[][];
}

export default function setup(ctx: RankContext) {
  const { group } = ctx;
  const cache = new SessionCache({ intraOpThreads: ctx.ortThreads });
  const ops = createOrtOps(cache);
  const kernelKind: KernelKind = ctx.args?.kernel ?? "fused";
  const local: LocalAttention = kernelKind === "fused" ? new FusedAttention({ threads: ctx.ortThreads }) : new OrtAttention({ cache });
  /** ParallelDims per (scheme, degrees, layout): ParallelDims.create builds groups, so each layout is made once. */
  const dimsByKey = new Map<string, ParallelDims>();

  const dimsFor = async (row: SchemeRow, shape: BlockShape, seq: number): Promise<ParallelDims> => {
    const key = `${row.scheme}/${row.u}x${row.r}/${row.layout}`;
    let dims = dimsByKey.get(key);
    if (dims === undefined) {
      dims = await ParallelDims.create(
        group,
        {
          sp: group.size,
          attention: row.scheme,
          ...(row.scheme === "hybrid" ? { ulyssesDegree: row.u, ringDegree: row.r } : {}),
          layout: row.layout,
        },
        { heads: shape.heads, kvHeads: shape.kvHeads, seqLength: seq },
      );
      dimsByKey.set(key, dims);
    }
    return dims;
  };

  const build = async (row: SchemeRow, shape: BlockShape, seq: number): Promise<BuiltRow> => {
    const dims = await dimsFor(row, shape, seq);
    const sp = dims.spGroup;
    let attention: ShardedAttention;
    let ring: RingAttention | null = null;
    const groups: ProcessGroup[] = [sp];
    if (row.scheme === "ulysses") {
      attention = new UlyssesAttention(local, sp);
    } else if (row.scheme === "ring") {
      ring = new RingAttention(local, sp, { overlap: row.overlap });
      attention = ring;
    } else {
      const hybrid = dims.hybridGroups;
      if (hybrid === null) throw new Error(`bench:schemes: ParallelDims built no hybrid groups for ${row.id}`);
      const h = new HybridAttention(local, sp, hybrid.ulysses, hybrid.ring, { overlap: row.overlap });
      ring = h.ring;
      attention = h;
      groups.push(hybrid.ulysses, hybrid.ring);
    }
    const block = new TransformerBlock(
      { hidden: shape.hidden, heads: shape.heads, kvHeads: shape.kvHeads, causal: true },
      { ops, localAttention: local, seed: 1 },
    );
    return { block: new ParallelBlock(block, sp, attention), groups, ring, runs: dims.runs(seq) };
  };

  return {
    /** Every row's timed steps at N = args.seq (results in row order). */
    async steps(args: StepsArgs): Promise<RankSteps[]> {
      const shape = args.block;
      const built: BuiltRow[] = [];
      for (const row of args.rows) built.push(await build(row, shape, args.seq));
      const inputs = built.map((b) => {
        const tokens = b.runs[group.rank]!.reduce((n, run) => n + run.length, 0);
        const rng = new Rng(7, group.rank);
        const x = new Tensor("float32", [shape.batch, tokens, shape.hidden]);
        const dy = new Tensor("float32", [shape.batch, tokens, shape.hidden]);
        rng.fillNormal(x.data);
        rng.fillNormal(dy.data, 0, 0.01);
        return { x, dy };
      });
      const step = async (i: number) => {
        const b = built[i]!;
        const { x, dy } = inputs[i]!;
        await group.barrier();
        b.ring?.resetStats();
        const before: CommStats[] = b.groups.map((g) => g.stats());
        const t0 = performance.now();
        const { context } = await b.block.forward(x, { seqRuns: b.runs });
        await b.block.backward(context, dy);
        const stepMs = performance.now() - t0;
        const after: CommStats[] = b.groups.map((g) => g.stats());
        return {
          stepMs,
          attentionBytes: commDelta(before, after, ATTENTION_OPS).bytesSent,
          gradBytes: commDelta(before, after, ["allReduce"]).bytesSent,
          ring: b.ring === null ? null : { ...b.ring.stats },
        };
      };
      // warm-up steps: sessions, pools and the threads backend's buffers are made here; rows that differ
      // only in overlap run the same kernels on the same shapes and groups, so the first of them warms both
      const warmed = new Set<string>();
      const warm = args.rows.map((row) => {
        const key = `${row.scheme}/${row.u}x${row.r}/${row.layout}`;
        const first = !warmed.has(key);
        warmed.add(key);
        return first;
      });
      for (let w = 0; w < args.warmups; w++) for (let i = 0; i < built.length; i++) if (warm[i]) await step(i);
      const results: RankSteps[] = built.map((b) => ({
        stepMs: [],
        attentionBytes: [],
        gradBytes: [],
        computeMs: b.ring === null ? null : [],
        waitMs: b.ring === null ? null : [],
        calls: b.ring === null ? null : [],
      }));
      for (let it = 0; it < args.iters; it++) {
        for (let i = 0; i < built.length; i++) {
          const s = await step(i);
          const r = results[i]!;
          r.stepMs.push(s.stepMs);
          r.attentionBytes.push(s.attentionBytes);
          r.gradBytes.push(s.gradBytes);
          if (s.ring !== null) {
            r.computeMs!.push(s.ring.computeMs);
            r.waitMs!.push(s.ring.waitMs);
            r.calls!.push(s.ring.calls);
          }
        }
      }
      return results;
    },

    /** Seconds of each repetition of the local kernel's forward + backward on [b, seqQ, heads, D] x [b, seqK, kvHeads, D] (after untimed runs). */
    async attentionRate(args: AttentionRateArgs): Promise<number[]> {
      const options = { causal: args.causal };
      const make = (seq: number, heads: number, seed: number) =>
        randomUniform([args.batch, seq, heads, args.headDim], { seed: seed + 16 * group.rank, low: -1, high: 1 }) as Tensor<"float32">;
      const q = make(args.seqQ, args.heads, 1);
      const k = make(args.seqK, args.kvHeads, 2);
      const v = make(args.seqK, args.kvHeads, 3);
      const dOut = make(args.seqQ, args.heads, 4);
      const run = async () => {
        const f = await local.forward(q, k, v, options);
        await local.backward(q, k, v, f.out, dOut, f.logSumExp, options);
      };
      await group.barrier();
      await warmUp(run, 1, 500);
      return timedRepeats(group, args.repeats, run);
    },

    /** Seconds of each repetition of the block's forward GEMMs over `rows` tokens (after untimed runs). */
    async gemmRate(args: GemmRateArgs): Promise<number[]> {
      const g = blockGemm(cache, args.rows, args.hidden);
      await group.barrier();
      await g.warm();
      return timedRepeats(group, args.repeats, () => g.run());
    },

    /** Seconds per exchange (one message to r + 1, one from r − 1) in each round of `iters` exchanges. */
    async p2p(args: P2PArgs): Promise<number[]> {
      const { rank, size } = group;
      const floats = Math.max(1, Math.floor(args.bytes / 4));
      const out = new Tensor("float32", [floats]);
      const into = new Tensor("float32", [floats]);
      out.data.fill(rank);
      const exchange = () => {
        const send = () => group.send(out, (rank + 1) % size, 91);
        const recv = () => group.recv(into, (rank - 1 + size) % size, 91);
        return rank % 2 === 0 ? Promise.all([send(), recv()]) : Promise.all([recv(), send()]);
      };
      await exchange(); // untimed: the outbox grows to the message size here
      const rounds: number[] = [];
      for (let round = 0; round < args.rounds; round++) {
        await group.barrier();
        const t0 = performance.now();
        for (let i = 0; i < args.iters; i++) await exchange();
        rounds.push((performance.now() - t0) / 1000 / args.iters);
      }
      return rounds;
    },

    async dispose() {
      if (local instanceof FusedAttention) local.release();
      await cache.release();
    },
  };
}
