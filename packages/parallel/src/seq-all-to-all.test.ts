import { createLocalGroups } from "@ulysses/collectives";
import { concat, evenSplitSizes, narrow, Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { ParallelError } from "./errors.js";
import { ScratchBuffers } from "./head-exchange.js";
import { headRouting, type HeadRouting } from "./head-routing.js";
import { headsToSeq, seqToHeads, type SeqExchange } from "./seq-all-to-all.js";
import { sequenceShards } from "./sequence-shards.js";
import { TensorPool } from "./tensor-pool.js";
import { joinShards, runRanks, shardOf } from "./testing-fixtures/test-support.js";

type F32 = Tensor<"float32">;

interface Case {
  name: string;
  ranks: number;
  batch: number;
  seq: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  /** Hand-counted copies of each kv head over all ranks (when some are replicated). */
  copies?: number[];
}

/** A [b, N, Hx, D] tensor of distinct small integers from `first` (so every sum below is exact and every misplaced float shows). */
function numbered(shape: readonly number[], first: number): F32 {
  const t = new Tensor("float32", shape);
  for (let i = 0; i < t.size; i++) t.data[i] = first + i;
  return t;
}

/** Heads `heads` of t [b, N, Hx, D], in that order, repeats included: [b, N, heads.length, D]. */
function pickHeads(t: F32, heads: readonly number[]): F32 {
  return concat(
    heads.map((h) => narrow(t, 2, h, 1)),
    2,
  );
}

/** t [b, s, Hx, D] with head h multiplied by copies[h]. */
function scaleHeads(t: F32, copies: readonly number[]): F32 {
  const [, , hx, d] = t.shape as unknown as [number, number, number, number];
  const out = new Tensor("float32", t.shape, Float32Array.from(t.data));
  for (let i = 0; i < out.size; i++) out.data[i]! *= copies[Math.floor(i / d) % hx]!;
  return out;
}

/** How many times each kv head appears in the routing's per-rank lists. */
function copiesOf(routing: HeadRouting): number[] {
  const copies = new Array<number>(routing.kvHeads).fill(0);
  for (const list of routing.kv) for (const h of list) copies[h]!++;
  return copies;
}

const cases: Case[] = [
  { name: "one rank", ranks: 1, batch: 1, seq: 5, heads: 2, kvHeads: 2, headDim: 3 },
  { name: "MHA on 2, batch 2", ranks: 2, batch: 2, seq: 8, heads: 4, kvHeads: 4, headDim: 3 },
  { name: "uneven sequence 10 on 3", ranks: 3, batch: 2, seq: 10, heads: 6, kvHeads: 3, headDim: 2 },
  { name: "uneven heads 6 on 4", ranks: 4, batch: 1, seq: 8, heads: 6, kvHeads: 6, headDim: 3 },
  { name: "GQA 8/2 on 4 (each kv head on 2 ranks)", ranks: 4, batch: 1, seq: 12, heads: 8, kvHeads: 2, headDim: 2, copies: [2, 2] },
  { name: "GQA 8/2 on 3, sequence 10 (a rank holds kv 1 twice)", ranks: 3, batch: 2, seq: 10, heads: 8, kvHeads: 2, headDim: 2, copies: [2, 3] },
  { name: "GQA 6/2 on 4, uneven heads (q 2, 3 straddle kv 0, 1)", ranks: 4, batch: 1, seq: 9, heads: 6, kvHeads: 2, headDim: 4, copies: [2, 3] },
];

/** One exchange (no chunkBytes), or one all-to-all per token of the smallest shard (chunkBytes 1: every area is larger). */
const chunkings = [
  { name: "one all-to-all", chunkBytes: undefined, calls: (_sizes: number[]) => 1 },
  { name: "in chunks of a token", chunkBytes: 1, calls: (sizes: number[]) => Math.min(...sizes) },
];

describe("seqToHeads / headsToSeq", () => {
  for (const c of cases)
    for (const chunking of chunkings)
      it(`${c.name}, ${chunking.name}: seqToHeads slices the full tensor, headsToSeq inverts it (copies summed with accumulate)`, async () => {
        const q = numbered([c.batch, c.seq, c.heads, c.headDim], 1);
        const k = numbered([c.batch, c.seq, c.kvHeads, c.headDim], 1 + q.size);
        const v = numbered([c.batch, c.seq, c.kvHeads, c.headDim], 1 + q.size + k.size);
        const sizes = evenSplitSizes(c.seq, c.ranks);
        const routing = headRouting(c.heads, c.kvHeads, c.ranks);
        const copies = copiesOf(routing);
        if (c.copies !== undefined) expect(copies).toEqual(c.copies);

        const perRank = await runRanks(c.ranks, async (group, rank) => {
          const shards = sequenceShards(sizes[rank]!, rank, c.ranks, { seqLength: c.seq });
          const exchange: SeqExchange = { group, routing, shards, scratch: new ScratchBuffers(), pool: new TensorPool(), chunkBytes: chunking.chunkBytes };
          const shard = (t: F32) => shardOf(t, sizes, rank);
          const [qh, kh, vh] = await seqToHeads(exchange, [
            { tensor: shard(q), heads: "q" },
            { tensor: shard(k), heads: "kv" },
            { tensor: shard(v), heads: "kv" },
          ]);
          const afterForward = group.stats().byOp.allToAll.calls;
          const [q2, k2, v2] = await headsToSeq(exchange, [
            { tensor: qh, heads: "q" },
            { tensor: kh, heads: "kv" },
            { tensor: vh, heads: "kv" },
          ]);
          const [qSum, kSum, vSum] = await headsToSeq(exchange, [
            { tensor: qh, heads: "q", accumulate: true },
            { tensor: kh, heads: "kv", accumulate: true },
            { tensor: vh, heads: "kv", accumulate: true },
          ]);
          return { qh, kh, vh, q2, k2, v2, qSum, kSum, vSum, afterForward, calls: group.stats().byOp.allToAll.calls };
        });

        perRank.forEach((r, rank) => {
          const mine = routing.q[rank]!;
          const qHeads = Array.from({ length: mine.count }, (_, i) => mine.start + i);
          // The heads layout is the full tensor narrowed to this rank's heads, all tokens.
          expect(r.qh.shape).toEqual([c.batch, c.seq, mine.count, c.headDim]);
          expect(Array.from(r.qh.data)).toEqual(Array.from(pickHeads(q, qHeads).data));
          expect(Array.from(r.kh.data)).toEqual(Array.from(pickHeads(k, routing.kv[rank]!).data));
          expect(Array.from(r.vh.data)).toEqual(Array.from(pickHeads(v, routing.kv[rank]!).data));
          // One all-to-all per direction (or per chunk), whatever the number of tensors.
          expect(r.afterForward).toBe(chunking.calls(sizes));
          expect(r.calls).toBe(3 * chunking.calls(sizes));
        });
        const join = (key: "q2" | "k2" | "v2" | "qSum" | "kSum" | "vSum") => Array.from(joinShards(perRank.map((r) => r[key])).data);
        // Exact inverse: every copy of a head is equal, so writing them over each other restores the input.
        expect(join("q2")).toEqual(Array.from(q.data));
        expect(join("k2")).toEqual(Array.from(k.data));
        expect(join("v2")).toEqual(Array.from(v.data));
        // Accumulating: query heads live on one rank (unchanged); each kv head is summed over its copies.
        expect(join("qSum")).toEqual(Array.from(q.data));
        expect(join("kSum")).toEqual(Array.from(scaleHeads(k, copies).data));
        expect(join("vSum")).toEqual(Array.from(scaleHeads(v, copies).data));
      });

  it("chunkBytes bounds the send and receive areas: 6 all-to-alls of at most 6 tokens each instead of one of 32", async () => {
    // 2 ranks, 64 tokens, 4 heads of 4 floats: q, k, v of one rank are 32 tokens x 12 heads x 16 B = 6144 B either way; 1024 B -> 6 chunks
    // (counted on whole tensors; half of each travels)
    const [ranks, seq, heads, d] = [2, 64, 4, 4];
    const q = numbered([1, seq, heads, d], 1);
    const k = numbered([1, seq, heads, d], 1 + q.size);
    const v = numbered([1, seq, heads, d], 1 + 2 * q.size);
    const sizes = evenSplitSizes(seq, ranks);
    const routing = headRouting(heads, heads, ranks);
    const results = await runRanks(ranks, async (group, rank) => {
      const shards = sequenceShards(sizes[rank]!, rank, ranks, { seqLength: seq });
      const run = async (chunkBytes: number | undefined) => {
        const scratch = new ScratchBuffers();
        const exchange: SeqExchange = { group, routing, shards, scratch, pool: new TensorPool(), chunkBytes };
        const before = group.stats().byOp.allToAll.calls;
        const parts = [q, k, v].map((t) => ({ tensor: shardOf(t, sizes, rank), heads: "q" as const }));
        const outs = await seqToHeads(exchange, parts);
        return { data: outs.map((t) => Array.from(t.data)), calls: group.stats().byOp.allToAll.calls - before, bytes: scratch.bytes };
      };
      return { whole: await run(undefined), chunked: await run(1024) };
    });
    for (const r of results) {
      expect(r.chunked.data).toEqual(r.whole.data);
      expect(r.whole.calls).toBe(1);
      expect(r.chunked.calls).toBe(6);
      // send and receive areas hold only the other rank's half of the heads (the own half is copied directly)
      expect(r.whole.bytes).toBe(2 * 3072);
      // windows of floor(32 c / 6): 5 or 6 tokens, 96 B a token for the other rank
      expect(r.chunked.bytes).toBe(2 * 6 * 96);
    }
  });

  for (const name of ["uneven heads 6 on 4", "GQA 8/2 on 4 (each kv head on 2 ranks)"])
    it(`${name}: accumulate onto pooled outputs that hold NaN (each head once: written over; replicated: summed from zero)`, async () => {
      const c = cases.find((x) => x.name === name)!;
      const k = numbered([c.batch, c.seq, c.kvHeads, c.headDim], 1);
      const sizes = evenSplitSizes(c.seq, c.ranks);
      const routing = headRouting(c.heads, c.kvHeads, c.ranks);
      const perRank = await runRanks(c.ranks, async (group, rank) => {
        const shards = sequenceShards(sizes[rank]!, rank, c.ranks, { seqLength: c.seq });
        const pool = new TensorPool();
        const exchange: SeqExchange = { group, routing, shards, scratch: new ScratchBuffers(), pool };
        const [kh] = await seqToHeads(exchange, [{ tensor: shardOf(k, sizes, rank), heads: "kv" }]);
        // the next output of the sequence layout's size comes from these buffers
        const stale = [pool.take([c.batch, sizes[rank]!, c.kvHeads, c.headDim], false), pool.take([c.batch, sizes[rank]!, c.kvHeads, c.headDim], false)];
        for (const t of stale) t.data.fill(Number.NaN);
        pool.give(...stale);
        const [back] = await headsToSeq(exchange, [{ tensor: kh, heads: "kv", accumulate: true }]);
        return { back, reused: stale.some((t) => t.data.buffer === back.data.buffer) };
      });
      for (const r of perRank) expect(r.reused).toBe(true);
      expect(Array.from(joinShards(perRank.map((r) => r.back)).data)).toEqual(Array.from(scaleHeads(k, copiesOf(routing)).data));
    });

  it("reused scratch and pool give bit-identical results, and one exchange sends exactly the blocks for other ranks", async () => {
    const c = cases[5]!;
    const p = c.ranks;
    const q = numbered([c.batch, c.seq, c.heads, c.headDim], 1);
    const k = numbered([c.batch, c.seq, c.kvHeads, c.headDim], 1 + q.size);
    const sizes = evenSplitSizes(c.seq, p);
    const routing = headRouting(c.heads, c.kvHeads, p);
    const results = await runRanks(p, async (group, rank) => {
      const shards = sequenceShards(sizes[rank]!, rank, p, { seqLength: c.seq });
      const exchange: SeqExchange = { group, routing, shards, scratch: new ScratchBuffers(), pool: new TensorPool() };
      const rounds: number[][] = [];
      let bytes = 0;
      for (let round = 0; round < 3; round++) {
        const before = group.stats().total.bytesSent;
        const [qh, kh] = await seqToHeads(exchange, [
          { tensor: shardOf(q, sizes, rank), heads: "q" },
          { tensor: shardOf(k, sizes, rank), heads: "kv" },
        ]);
        bytes = group.stats().total.bytesSent - before;
        const [back] = await headsToSeq(exchange, [{ tensor: kh, heads: "kv", accumulate: true }]);
        rounds.push([...qh.data, ...kh.data, ...back.data]);
        exchange.pool!.give(qh, kh, back);
      }
      return { rounds, bytes };
    });
    results.forEach((r, rank) => {
      expect(r.rounds[1]).toEqual(r.rounds[0]);
      expect(r.rounds[2]).toEqual(r.rounds[0]);
      let expected = 0;
      for (let j = 0; j < p; j++) {
        if (j !== rank) expected += c.batch * sizes[rank]! * (routing.q[j]!.count + routing.kv[j]!.length) * c.headDim * 4;
      }
      expect(r.bytes).toBe(expected);
    });
  });
});

describe("seqAllToAll errors", () => {
  it("rejects before any communication: wrong shapes, accumulate towards heads, a routing for another group size", async () => {
    const routing = headRouting(4, 2, 2);
    await runRanks(2, async (group, rank) => {
      const shards = sequenceShards(3, rank, 2, { seqLength: 6 });
      const exchange: SeqExchange = { group, routing, shards };
      const q = numbered([1, 3, 4, 2], 1);
      const k = numbered([1, 3, 2, 2], 1);
      await expect(seqToHeads(exchange, [{ tensor: q, heads: "kv" }])).rejects.toThrow(
        /part 0 \(kv heads\) on rank \d must be float32 \[1, 3, 2, 2\] in the sequence layout, got float32 \[1, 3, 4, 2\]/,
      );
      await expect(headsToSeq(exchange, [{ tensor: q, heads: "q" }])).rejects.toThrow(/must be float32 \[1, 6, 2, 2\] in the heads layout/);
      await expect(seqToHeads(exchange, [{ tensor: k, heads: "kv", accumulate: true }])).rejects.toThrow(/only heads-to-sequence/);
      await expect(seqToHeads({ ...exchange, routing: headRouting(4, 2, 4) }, [{ tensor: q, heads: "q" }])).rejects.toThrow(
        /group of 2 ranks, head routing for 4, sequence shards for 2/,
      );
      await expect(seqToHeads(exchange, [])).rejects.toThrow(ParallelError);
      // an input handed back to the exchange's pool before the call would come back as its output
      const pool = new TensorPool();
      const input = pool.take([1, 3, 4, 2], false);
      input.data.set(q.data);
      pool.give(input);
      await expect(seqToHeads({ ...exchange, pool }, [{ tensor: input, heads: "q" }])).rejects.toThrow(/an output shares memory with an input/);
      for (const bad of [0, 2.5, Number.NaN]) {
        await expect(seqToHeads({ ...exchange, chunkBytes: bad }, [{ tensor: q, heads: "q" }])).rejects.toThrow(
          `seqAllToAll chunkBytes: the exchange chunk size must be a positive integer of bytes, got ${bad}`,
        );
      }
      expect(group.stats().total.calls).toBe(0);
    });
  });

  it("runs on groups made directly with createLocalGroups", async () => {
    const groups = createLocalGroups(2);
    try {
      const routing = headRouting(2, 1, 2);
      const x = numbered([1, 4, 1, 2], 1);
      const results = await Promise.all(
        groups.map(async (group, rank) => {
          const exchange: SeqExchange = { group, routing, shards: sequenceShards(2, rank, 2) };
          const [heads] = await seqToHeads(exchange, [{ tensor: shardOf(x, [2, 2], rank), heads: "kv" }]);
          const [back] = await headsToSeq(exchange, [{ tensor: heads, heads: "kv", accumulate: true }]);
          return { heads, back };
        }),
      );
      // One kv head on both ranks: each gets the whole sequence of it; the accumulated inverse is twice the input.
      for (const r of results) expect(Array.from(r.heads.data)).toEqual(Array.from(x.data));
      expect(Array.from(joinShards(results.map((r) => r.back)).data)).toEqual(Array.from(x.data, (value) => 2 * value));
    } finally {
      await Promise.all(groups.map((g) => g.destroy()));
    }
  });
});
