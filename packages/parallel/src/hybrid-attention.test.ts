/**
 * The zigzag layout, ring attention on it and HybridAttention (Ulysses x
 * ring), against the single-rank ReferenceAttention on the whole sequence
 * (forward out, backward dq, dk, dv to 1e-5; the wrappers' local kernel is
 * StatsReferenceAttention, whose backward reads the merged lse and out);
 * the causal work per rank counted from the kernel calls; exact bytes per
 * rank from group.stats() against the scheme formulas.
 */
import { createLocalGroups } from "@ulysses/collectives";
import {
  ReferenceAttention,
  StatsReferenceAttention,
  type AttentionForwardResult,
  type AttentionGradients,
  type AttentionOptions,
  type LocalAttention,
} from "@ulysses/kernels";
import { maxRelativeError } from "@ulysses/kernels/testing";
import type { Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { headRouting } from "./head-routing.js";
import { HybridAttention, type HybridContext } from "./hybrid-attention.js";
import { ParallelDims, parallelDimsProblems } from "./parallel-dims.js";
import { createShardedAttention } from "./parallelize.js";
import { RingAttention, type RingContext } from "./ring-attention.js";
import { hybridBytes, ringBytes } from "./scheme-bytes.js";
import { isContiguous, sequenceShards, shardRuns, type SequenceRun } from "./sequence-shards.js";
import { attentionInputs, gatherShard, runRanks, scatterShards } from "./testing-fixtures/test-support.js";

type F32 = Tensor<"float32">;

const reference = new ReferenceAttention();
const stats = new StatsReferenceAttention();

const run = (start: number, length: number): SequenceRun => ({ start, length });

describe("sequence layouts", () => {
  it("zigzag: rank r holds chunks r and 2P − 1 − r; uneven N from evenSplitSizes(N, 2P)", () => {
    expect(shardRuns(8, 2, "zigzag")).toEqual([[run(0, 2), run(6, 2)], [run(2, 4)]]);
    expect(shardRuns(16, 4, "zigzag")).toEqual([[run(0, 2), run(14, 2)], [run(2, 2), run(12, 2)], [run(4, 2), run(10, 2)], [run(6, 4)]]);
    // 10 over 4 chunks: [3, 3, 2, 2]
    expect(shardRuns(10, 2, "zigzag")).toEqual([[run(0, 3), run(8, 2)], [run(3, 5)]]);
    expect(shardRuns(10, 3, "contiguous")).toEqual([[run(0, 4)], [run(4, 3)], [run(7, 3)]]);
  });

  it("hybrid zigzag: each Ulysses group of u ranks splits its ring chunk pair evenly, in order", () => {
    // N = 16, u = 2, r = 2: chunks of 4; group 0 holds chunks 0 and 3, group 1 chunks 1 and 2
    expect(shardRuns(16, 4, "zigzag", 2)).toEqual([[run(0, 4)], [run(12, 4)], [run(4, 4)], [run(8, 4)]]);
    // N = 18: chunks [5, 5, 4, 4]; group 0 = [0, 5) + [14, 18) = 9 tokens -> 5, 4; group 1 = [5, 14) -> 5, 4
    expect(shardRuns(18, 4, "zigzag", 2)).toEqual([[run(0, 5)], [run(14, 4)], [run(5, 5)], [run(10, 4)]]);
    // u = 3, r = 1: one chunk pair covering everything, cut in 3
    expect(shardRuns(9, 3, "zigzag", 1)).toEqual([[run(0, 3)], [run(3, 3)], [run(6, 3)]]);
  });

  it("sequenceShards checks explicit runs: covered once, increasing per rank, matching the local length", () => {
    const zig = shardRuns(8, 2, "zigzag");
    const shards = sequenceShards(4, 0, 2, { seqRuns: zig });
    expect(shards.sizes).toEqual([4, 4]);
    expect(shards.starts).toEqual([0, 4]);
    expect(isContiguous(shards)).toBe(false);
    expect(isContiguous(sequenceShards(4, 0, 2, { seqLength: 8 }))).toBe(true);
    expect(() => sequenceShards(4, 0, 2, { seqRuns: [[run(0, 4)], [run(3, 4)]] })).toThrow(/position 3 is off|exactly once/);
    expect(() =>
      sequenceShards(4, 0, 2, {
        seqRuns: [
          [run(4, 2), run(0, 2)],
          [run(2, 2), run(6, 2)],
        ],
      }),
    ).toThrow(/increasing and apart/);
    expect(() => sequenceShards(3, 0, 2, { seqRuns: zig })).toThrow(/rank 0 holds 3 tokens but the shard sizes \[4, 4\]/);
  });
});

interface Case {
  name: string;
  batch: number;
  seq: number;
  heads: number;
  kvHeads: number;
  headDim: number;
}

const inputs = attentionInputs;

/** Counts the query x key pairs the kernel is asked for (a causal call of s x s counts s(s+1)/2). */
class WorkCounter implements LocalAttention {
  readonly name = "work-counter";
  pairs = 0;
  constructor(private readonly inner: LocalAttention) {}
  forward(q: F32, k: F32, v: F32, options: AttentionOptions): Promise<AttentionForwardResult> {
    const sq = q.shape[1]!;
    const sk = k.shape[1]!;
    this.pairs += options.causal ? (sq * (sq + 1)) / 2 + sq * (sk - sq) : sq * sk;
    return this.inner.forward(q, k, v, options);
  }
  backward(q: F32, k: F32, v: F32, out: F32, dOut: F32, lse: F32, options: AttentionOptions): Promise<AttentionGradients> {
    return this.inner.backward(q, k, v, out, dOut, lse, options);
  }
  release(): void {}
}

async function expected(x: ReturnType<typeof inputs>, causal: boolean, documents?: Int32Array) {
  const options: AttentionOptions = { causal, ...(documents ? { documents: { query: documents, key: documents } } : {}) };
  const forward = await reference.forward(x.q, x.k, x.v, options);
  return { out: forward.out, ...(await reference.backward(x.q, x.k, x.v, forward.out, x.dOut, forward.logSumExp, options)) };
}

type Scheme = { kind: "ring" } | { kind: "hybrid"; u: number; r: number; chunkBytes?: number };

/** One attention forward + backward per rank on the layout's shards; joins the results in sequence order. */
async function runScheme(
  p: number,
  scheme: Scheme,
  layout: "zigzag" | "contiguous",
  c: Case,
  x: ReturnType<typeof inputs>,
  causal: boolean,
  documents?: Int32Array,
) {
  const ringDegree = scheme.kind === "ring" ? p : scheme.r;
  const runs = shardRuns(c.seq, p, layout, ringDegree);
  const perRank = await Promise.all(
    createLocalGroups(p).map(async (world) => {
      const counter = new WorkCounter(stats);
      let attention: RingAttention | HybridAttention;
      const groups = [world];
      if (scheme.kind === "ring") attention = new RingAttention(counter, world);
      else {
        const dims = await ParallelDims.create(
          world,
          { sp: p, attention: "hybrid", ulyssesDegree: scheme.u, ringDegree: scheme.r, layout },
          { heads: c.heads, kvHeads: c.kvHeads, seqLength: c.seq },
        );
        const options = scheme.chunkBytes === undefined ? {} : { exchangeChunkBytes: scheme.chunkBytes };
        attention = new HybridAttention(counter, world, dims.hybridGroups!.ulysses, dims.hybridGroups!.ring, options);
        groups.push(dims.hybridGroups!.ulysses, dims.hybridGroups!.ring);
      }
      // bytes this rank sent on the world and its subgroups
      const sent = () => groups.reduce((n, g) => n + g.stats().total.bytesSent, 0);
      const before = sent();
      const mine = runs[world.rank]!;
      const shard = (t: F32) => gatherShard(t, mine);
      const options = { causal, seqRuns: runs, ...(documents ? { sequenceDocuments: documents } : {}) };
      const { out, context } = await attention.forward(shard(x.q), shard(x.k), shard(x.v), options);
      const forward = sent() - before;
      const pairs = counter.pairs;
      const grads =
        attention instanceof RingAttention
          ? await attention.backward(context as RingContext, shard(x.dOut))
          : await attention.backward(context as HybridContext, shard(x.dOut));
      const backward = sent() - before - forward;
      await world.destroy();
      return { out, ...grads, forward, backward, pairs };
    }),
  );
  const join = (key: "out" | "dq" | "dk" | "dv") =>
    scatterShards(
      perRank.map((r) => r[key]),
      runs,
    );
  return { out: join("out"), dq: join("dq"), dk: join("dk"), dv: join("dv"), perRank, runs };
}

async function expectEqual(got: Awaited<ReturnType<typeof runScheme>>, want: Awaited<ReturnType<typeof expected>>, label: string) {
  for (const key of ["out", "dq", "dk", "dv"] as const) expect(maxRelativeError(got[key], want[key]), `${key} ${label}`).toBeLessThanOrEqual(1e-5);
}

const cases: Case[] = [
  { name: "MHA, batch 2", batch: 2, seq: 16, heads: 4, kvHeads: 4, headDim: 4 },
  { name: "GQA kv=2", batch: 1, seq: 16, heads: 4, kvHeads: 2, headDim: 4 },
  { name: "MQA kv=1", batch: 1, seq: 16, heads: 4, kvHeads: 1, headDim: 4 },
  { name: "N = 18, not divisible by 2P = 8, batch 2, GQA", batch: 2, seq: 18, heads: 4, kvHeads: 2, headDim: 4 },
];

describe("ring attention on the zigzag layout equals single-rank ReferenceAttention", () => {
  for (const c of cases) {
    it(`${c.name} (P = 2, 3, 4)`, async () => {
      const x = inputs(c, c.seq * 7 + c.kvHeads);
      const want = await expected(x, true);
      for (const p of [2, 3, 4]) await expectEqual(await runScheme(p, { kind: "ring" }, "zigzag", c, x, true), want, `P=${p}`);
    });
  }

  it("balances the causal work: every rank gets the same query x key pairs (N = 64, P = 4), contiguous gives the last rank 6.6x the first's", async () => {
    const c: Case = { name: "", batch: 1, seq: 64, heads: 2, kvHeads: 1, headDim: 4 };
    const x = inputs(c, 3);
    const zig = await runScheme(4, { kind: "ring" }, "zigzag", c, x, true);
    // own block: 16 tokens causal = 136 pairs; each other block: 16 x 8 = 128 pairs
    expect(zig.perRank.map((r) => r.pairs)).toEqual([520, 520, 520, 520]);
    const contiguous = await runScheme(4, { kind: "ring" }, "contiguous", c, x, true);
    // rank r: its own 16 x 16 causal block (136) and r full blocks (256 each)
    expect(contiguous.perRank.map((r) => r.pairs)).toEqual([136, 392, 648, 904]);
    // total pairs are the causal count N(N+1)/2 either way
    expect(zig.perRank.reduce((a, r) => a + r.pairs, 0)).toBe((64 * 65) / 2);
  });

  it("packed documents (causal): equals the single-rank run with the same documents", async () => {
    const c: Case = { name: "", batch: 2, seq: 12, heads: 4, kvHeads: 2, headDim: 4 };
    const documents = Int32Array.from([3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 5, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1]);
    const x = inputs(c, 77);
    const want = await expected(x, true, documents);
    for (const p of [2, 3]) await expectEqual(await runScheme(p, { kind: "ring" }, "zigzag", c, x, true, documents), want, `P=${p}`);
  });

  it("sends every block the whole ring: ringBytes with skipsFuture false, on uneven shards too", async () => {
    const c: Case = { name: "", batch: 2, seq: 18, heads: 4, kvHeads: 2, headDim: 4 };
    const got = await runScheme(4, { kind: "ring" }, "zigzag", c, inputs(c, 5), true);
    const sizes = got.runs.map((r) => r.reduce((n, x) => n + x.length, 0));
    got.perRank.forEach((r, rank) => {
      const want = ringBytes(sizes, rank, false, c.batch, c.kvHeads, c.headDim);
      expect([r.forward, r.backward], `rank ${rank}`).toEqual([want.forward, want.backward]);
    });
  });
});

const hybrids: { u: number; r: number; chunkBytes?: number }[] = [
  { u: 2, r: 2 },
  { u: 1, r: 4 },
  { u: 4, r: 1 },
  // the Ulysses exchanges in all-to-alls of at most 48 bytes a side (a token or two each): the same results and bytes
  { u: 2, r: 2, chunkBytes: 48 },
];

describe("HybridAttention (Ulysses x ring, P = 4) equals single-rank ReferenceAttention", () => {
  for (const c of cases) {
    for (const causal of [true, false]) {
      it(`${c.name}, causal ${causal}: 2x2, 1x4, 4x1, 2x2 with chunked exchanges`, async () => {
        const x = inputs(c, c.seq * 13 + c.kvHeads + (causal ? 1 : 0));
        const want = await expected(x, causal);
        for (const { u, r, chunkBytes } of hybrids) {
          const layouts = causal && r > 1 ? (["zigzag", "contiguous"] as const) : (["contiguous"] as const);
          for (const layout of layouts) {
            const got = await runScheme(4, { kind: "hybrid", u, r, chunkBytes }, layout, c, x, causal);
            await expectEqual(got, want, `${u}x${r} ${layout}${chunkBytes === undefined ? "" : " chunked"}`);
            const sizes = got.runs.map((run) => run.reduce((n, x) => n + x.length, 0));
            const routing = headRouting(c.heads, c.kvHeads, u);
            got.perRank.forEach((rank, p) => {
              const bytes = hybridBytes(routing, sizes, p, r, causal && layout === "contiguous", c.batch, c.headDim);
              expect([rank.forward, rank.backward], `${u}x${r} ${layout} rank ${p} bytes`).toEqual([bytes.forward, bytes.backward]);
            });
          }
        }
      });
    }
  }

  it("packed documents, zigzag 2x2: equals the single-rank run with the same documents", async () => {
    const c: Case = { name: "", batch: 2, seq: 16, heads: 4, kvHeads: 2, headDim: 4 };
    const documents = Int32Array.from([0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6]);
    const x = inputs(c, 91);
    await expectEqual(await runScheme(4, { kind: "hybrid", u: 2, r: 2 }, "zigzag", c, x, true, documents), await expected(x, true, documents), "2x2");
  });

  it("with u > kvHeads the Ulysses group replicates kv heads, and still equals one rank (kv 1, 2x2 and 4x1)", async () => {
    const c: Case = { name: "", batch: 1, seq: 16, heads: 4, kvHeads: 1, headDim: 4 };
    const x = inputs(c, 12);
    const want = await expected(x, true);
    await expectEqual(await runScheme(4, { kind: "hybrid", u: 2, r: 2 }, "zigzag", c, x, true), want, "2x2");
    expect(headRouting(4, 1, 2).replicatedKv).toBe(true);
  });
});

describe("ParallelDims: hybrid degrees and layouts", () => {
  const shape = { worldSize: 8, heads: 4, kvHeads: 2, seqLength: 64 };
  it("defaults: u = gcd(sp, kvHeads); zigzag when a ring runs, contiguous otherwise", async () => {
    const dims = await Promise.all(
      createLocalGroups(8).map((w) => ParallelDims.create(w, { sp: 8, attention: "hybrid" }, { heads: 4, kvHeads: 2, seqLength: 64 })),
    );
    expect([dims[0]!.ulyssesDegree, dims[0]!.ringDegree, dims[0]!.layout]).toEqual([2, 4, "zigzag"]);
    // rank 5 = ring rank 2, Ulysses rank 1
    expect([dims[5]!.hybridGroups!.ring.rank, dims[5]!.hybridGroups!.ulysses.rank]).toEqual([2, 1]);
    const ulysses = await Promise.all(createLocalGroups(2).map((w) => ParallelDims.create(w, { sp: 2 }, { heads: 4, kvHeads: 2, seqLength: 8 })));
    expect([ulysses[0]!.layout, ulysses[0]!.hybridGroups]).toEqual(["contiguous", null]);
  });

  it("names every value that is off", () => {
    expect(parallelDimsProblems({ sp: 8, attention: "hybrid", ulyssesDegree: 3 }, shape)).toEqual([
      "ulyssesDegree 3 x ringDegree 2.667 must be positive integers whose product is sp 8",
    ]);
    expect(parallelDimsProblems({ sp: 8, attention: "hybrid", ulyssesDegree: 8 }, shape)).toEqual([
      "heads 4 is smaller than ulyssesDegree 8: Ulysses gives every rank of its group at least one attention head",
    ]);
    expect(parallelDimsProblems({ sp: 8, attention: "ring", ringDegree: 8 }, shape)).toEqual(["ringDegree 8 is for hybrid attention only (attention is ring)"]);
    expect(parallelDimsProblems({ sp: 4, dp: 2, attention: "ulysses", layout: "zigzag" }, shape)).toEqual([
      "layout zigzag balances a ring; ulysses attention has none (use contiguous)",
    ]);
    expect(parallelDimsProblems({ sp: 8, attention: "ring" }, { ...shape, seqLength: 7 })).toEqual([
      "seq 7 is too short for sp 8: every rank needs at least one token",
    ]);
    // the shortest sequence still gives every rank of a zigzag layout a token
    expect(shardRuns(8, 8, "zigzag").every((r) => r.length > 0)).toBe(true);
    expect(shardRuns(8, 8, "zigzag", 2).every((r) => r.length > 0)).toBe(true);
    expect(parallelDimsProblems({ sp: 8, attention: "hybrid", ringDegree: 4, layout: "contiguous" }, shape)).toEqual([]);
  });

  it("createShardedAttention('hybrid') needs the subgroups", async () => {
    await runRanks(2, async (group) => {
      expect(() => createShardedAttention("hybrid", stats, group)).toThrow(/needs its Ulysses and ring subgroups/);
    });
  });
});
