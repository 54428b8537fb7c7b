/**
 * RingAttention against the single-rank ReferenceAttention on the whole
 * sequence (forward out, backward dq, dk, dv to 1e-5), with the ring's local
 * kernel a float64 reference whose backward reads the lse and out it is given
 * (`StatsReferenceAttention` of @ulysses/kernels); documents against the single-rank run with
 * the same documents; exact bytes per rank from group.stats().
 */
import type { ProcessGroup } from "@ulysses/collectives";
import {
  ReferenceAttention,
  StatsReferenceAttention,
  type AttentionForwardResult,
  type AttentionGradients,
  type AttentionOptions,
  type LocalAttention,
} from "@ulysses/kernels";
import { maxRelativeError } from "@ulysses/kernels/testing";
import { evenSplitSizes, type Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { ParallelError } from "./errors.js";
import { createShardedAttention } from "./parallelize.js";
import { parallelDimsProblems } from "./parallel-dims.js";
import { RingAttention, ringBackwardBytes, ringForwardBytes } from "./ring-attention.js";
import { joinShards, runRanks, shardOf } from "./testing-fixtures/test-support.js";
import { attentionInputs } from "./testing-fixtures/test-support.js";

type F32 = Tensor<"float32">;

const reference = new ReferenceAttention();
const stats = new StatsReferenceAttention();

interface Case {
  name: string;
  batch: number;
  seq: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  ranks: number[];
}

const inputs = attentionInputs;

/** Counts the local kernel's calls (forward and backward) of one rank. */
class CountingAttention implements LocalAttention {
  readonly name = "counting";
  forwards = 0;
  backwards = 0;
  constructor(private readonly inner: LocalAttention) {}
  forward(q: F32, k: F32, v: F32, options: AttentionOptions): Promise<AttentionForwardResult> {
    this.forwards++;
    return this.inner.forward(q, k, v, options);
  }
  backward(q: F32, k: F32, v: F32, out: F32, dOut: F32, lse: F32, options: AttentionOptions): Promise<AttentionGradients> {
    this.backwards++;
    return this.inner.backward(q, k, v, out, dOut, lse, options);
  }
  release(): void {}
}

/** Ring forward + backward on `p` ranks; joins out, dq, dk, dv and keeps each rank's stats and kernel calls. */
async function runRing(p: number, c: Case, x: ReturnType<typeof inputs>, causal: boolean, documents?: Int32Array) {
  const sizes = evenSplitSizes(c.seq, p);
  const perRank = await runRanks(p, async (group, rank) => {
    const local = new CountingAttention(stats);
    const ring = new RingAttention(local, group);
    const shard = (t: F32) => shardOf(t, sizes, rank);
    const options = { causal, seqLength: c.seq, ...(documents ? { sequenceDocuments: documents } : {}) };
    const { out, context } = await ring.forward(shard(x.q), shard(x.k), shard(x.v), options);
    const forward = group.stats().total.bytesSent;
    const forwardCalls = local.forwards;
    const grads = await ring.backward(context, shard(x.dOut));
    return { out, ...grads, forward, backward: group.stats().total.bytesSent - forward, forwardCalls, backwardCalls: local.backwards };
  });
  const join = (key: "out" | "dq" | "dk" | "dv") => joinShards(perRank.map((r) => r[key]));
  return { out: join("out"), dq: join("dq"), dk: join("dk"), dv: join("dv"), perRank };
}

async function expectSingleRank(c: Case, x: ReturnType<typeof inputs>, causal: boolean, documents?: Int32Array) {
  const options: AttentionOptions = { causal, ...(documents ? { documents: { query: documents, key: documents } } : {}) };
  const expected = await reference.forward(x.q, x.k, x.v, options);
  const grads = await reference.backward(x.q, x.k, x.v, expected.out, x.dOut, expected.logSumExp, options);
  const runs = [];
  for (const p of c.ranks) {
    const got = await runRing(p, c, x, causal, documents);
    expect(maxRelativeError(got.out, expected.out), `out P=${p}`).toBeLessThanOrEqual(1e-5);
    expect(maxRelativeError(got.dq, grads.dq), `dq P=${p}`).toBeLessThanOrEqual(1e-5);
    expect(maxRelativeError(got.dk, grads.dk), `dk P=${p}`).toBeLessThanOrEqual(1e-5);
    expect(maxRelativeError(got.dv, grads.dv), `dv P=${p}`).toBeLessThanOrEqual(1e-5);
    runs.push(got);
  }
  return runs;
}

const cases: Case[] = [
  { name: "MHA, batch 2", batch: 2, seq: 12, heads: 4, kvHeads: 4, headDim: 8, ranks: [2, 3, 4] },
  { name: "GQA kv=2", batch: 1, seq: 12, heads: 4, kvHeads: 2, headDim: 4, ranks: [2, 3, 4] },
  { name: "MQA kv=1", batch: 1, seq: 12, heads: 4, kvHeads: 1, headDim: 4, ranks: [2, 3, 4] },
  { name: "uneven sequence 10 on 3 and 4, batch 2, GQA", batch: 2, seq: 10, heads: 4, kvHeads: 2, headDim: 4, ranks: [3, 4] },
  { name: "fewer heads than ranks (3 on 4)", batch: 1, seq: 9, heads: 3, kvHeads: 3, headDim: 4, ranks: [4] },
  { name: "one token per rank (4 on 4)", batch: 1, seq: 4, heads: 2, kvHeads: 1, headDim: 4, ranks: [4] },
];

describe.each([true, false])("ring attention (causal %s) equals single-rank ReferenceAttention", (causal) => {
  for (const c of cases) {
    it(`${c.name} (P = ${c.ranks.join(", ")})`, async () => {
      const x = inputs(c, c.seq * 31 + c.heads + (causal ? 1 : 0));
      const runs = await expectSingleRank(c, x, causal);
      for (const [index, run] of runs.entries()) {
        const p = c.ranks[index]!;
        // causal: rank r calls the kernel on blocks 0..r only; non-causal on all P
        expect(run.perRank.map((r) => r.forwardCalls)).toEqual(Array.from({ length: p }, (_, r) => (causal ? r + 1 : p)));
        expect(run.perRank.map((r) => r.backwardCalls)).toEqual(run.perRank.map((r) => r.forwardCalls));
      }
    });
  }
});

describe("packed documents", () => {
  // row 0: documents 3, 4, 5 with 4 crossing the shard boundaries at P = 2, 3, 4; row 1: one long document, then a short one
  const documents = Int32Array.from([3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 5, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1]);
  const c: Case = { name: "", batch: 2, seq: 12, heads: 4, kvHeads: 2, headDim: 4, ranks: [2, 3, 4] };

  it.each([true, false])("causal %s: equals the single-rank run with the same documents", async (causal) => {
    await expectSingleRank(c, inputs(c, 41 + (causal ? 1 : 0)), causal, documents);
  });

  it("skips the blocks whose keys hold none of the queries' documents (forward and backward)", async () => {
    // 8 tokens on 4 ranks: [0 0 | 0 1 | 1 1 | 2 2]; rank 2 skips block 0, rank 3 blocks 0-2 (causal) or every other block
    const one: Case = { name: "", batch: 1, seq: 8, heads: 2, kvHeads: 2, headDim: 4, ranks: [4] };
    const ids = Int32Array.from([0, 0, 0, 1, 1, 1, 2, 2]);
    const [causalRun] = await expectSingleRank(one, inputs(one, 5), true, ids);
    expect(causalRun!.perRank.map((r) => r.forwardCalls)).toEqual([1, 2, 2, 1]);
    expect(causalRun!.perRank.map((r) => r.backwardCalls)).toEqual([1, 2, 2, 1]);
    const [fullRun] = await expectSingleRank(one, inputs(one, 6), false, ids);
    expect(fullRun!.perRank.map((r) => r.forwardCalls)).toEqual([2, 3, 2, 1]);
    // skipped blocks are still relayed: the bytes do not depend on the documents
    const tokenBytes = 2 * one.batch * one.kvHeads * one.headDim * 4;
    expect(fullRun!.perRank.map((r) => r.forward)).toEqual([0, 1, 2, 3].map((r) => ringForwardBytes([2, 2, 2, 2], r, false, tokenBytes)));
  });
});

describe("communication accounting", () => {
  it("equal shards: (P−1)·c·s forward and 2·(P−1)·c·s backward non-causal; causal rank r sends (r+1)·c·s, then (P−2 or P−1)·c·s more", async () => {
    const c: Case = { name: "", batch: 2, seq: 24, heads: 4, kvHeads: 2, headDim: 4, ranks: [2, 3, 4] };
    const x = inputs(c, 9);
    const tokenBytes = 2 * c.batch * c.kvHeads * c.headDim * 4;
    for (const p of c.ranks) {
      const blockBytes = (c.seq / p) * tokenBytes;
      const full = await runRing(p, c, x, false);
      expect(full.perRank.map((r) => r.forward)).toEqual(Array(p).fill((p - 1) * blockBytes));
      expect(full.perRank.map((r) => r.backward)).toEqual(Array(p).fill(2 * (p - 1) * blockBytes));
      const causal = await runRing(p, c, x, true);
      const forward = Array.from({ length: p }, (_, r) => (r < p - 1 ? (r + 1) * blockBytes : 0));
      expect(causal.perRank.map((r) => r.forward)).toEqual(forward);
      // accumulators of every block but r's own and P − 1's (which only P − 1 uses)
      expect(causal.perRank.map((r) => r.backward)).toEqual(forward.map((f, r) => f + (r < p - 1 ? p - 2 : p - 1) * blockBytes));
    }
  });

  it.each([true, false])("uneven shards (10 on 3 and 4, causal %s): bytes equal ringForwardBytes / ringBackwardBytes", async (causal) => {
    const c: Case = { name: "", batch: 1, seq: 10, heads: 2, kvHeads: 1, headDim: 4, ranks: [3, 4] };
    const x = inputs(c, 10);
    const tokenBytes = 2 * c.batch * c.kvHeads * c.headDim * 4;
    for (const p of c.ranks) {
      const sizes = evenSplitSizes(c.seq, p);
      const got = await runRing(p, c, x, causal);
      expect(got.perRank.map((r) => r.forward)).toEqual(sizes.map((_, r) => ringForwardBytes(sizes, r, causal, tokenBytes)));
      expect(got.perRank.map((r) => r.backward)).toEqual(sizes.map((_, r) => ringBackwardBytes(sizes, r, causal, tokenBytes)));
    }
    // 10 on 4 = [3, 3, 2, 2], non-causal rank 0 sends blocks 0, 3, 2 forward: 7 tokens; backward also dk, dv of 3, 2, 1: 7 more
    expect(ringForwardBytes([3, 3, 2, 2], 0, false, 1)).toBe(7);
    expect(ringBackwardBytes([3, 3, 2, 2], 0, false, 1)).toBe(14);
    expect(ringForwardBytes([3, 3, 2, 2], 3, true, 1)).toBe(0);
    expect(ringBackwardBytes([3, 3, 2, 2], 3, true, 1)).toBe(8);
    // causal rank 0: k, v of block 0; accumulators of blocks 2 and 1 (relayed, not 3)
    expect(ringForwardBytes([3, 3, 2, 2], 0, true, 1)).toBe(3);
    expect(ringBackwardBytes([3, 3, 2, 2], 0, true, 1)).toBe(8);
  });
});

describe("contract and errors", () => {
  it("accepts any GQA head counts on any group (no heads >= P limit), rejects heads % kvHeads != 0 naming them", async () => {
    await runRanks(4, async (group) => {
      const ring = new RingAttention(stats, group);
      expect(() => ring.checkHeads(1, 1)).not.toThrow();
      expect(() => ring.checkHeads(6, 2)).not.toThrow();
      expect(() => ring.checkHeads(6, 4)).toThrow(/heads \(6\) must be a multiple of kvHeads \(4\)/);
      expect(ring.name).toBe("ring(reference-stats, P=4)");
    });
    expect(parallelDimsProblems({ sp: 4, attention: "ring" }, { worldSize: 4, heads: 2, kvHeads: 1, seqLength: 8 })).toEqual([]);
    expect(parallelDimsProblems({ sp: 4, attention: "ring" }, { worldSize: 4, heads: 2, kvHeads: 1, seqLength: 3 })).toEqual([
      "seq 3 is too short for sp 4: every rank needs at least one token",
    ]);
  });

  it("refuses ReferenceAttention for P > 1 (its backward ignores the lse and out it is given)", async () => {
    await runRanks(2, async (group) => {
      expect(() => new RingAttention(reference, group)).toThrow(ParallelError);
      expect(() => createShardedAttention("ring", reference, group)).toThrow(/recomputes the probabilities from q and k/);
      expect(createShardedAttention("ring", stats, group)).toBeInstanceOf(RingAttention);
    });
    await runRanks(1, async (group) => expect(() => new RingAttention(reference, group)).not.toThrow());
  });

  it("rejects a foreign or released context, a wrong dOut and a mismatched shard, before communicating", async () => {
    const c: Case = { name: "", batch: 1, seq: 8, heads: 2, kvHeads: 1, headDim: 4, ranks: [] };
    const x = inputs(c, 3);
    await runRanks(2, async (group: ProcessGroup, rank) => {
      const ring = new RingAttention(stats, group);
      const other = new RingAttention(stats, group);
      const shard = (t: F32) => shardOf(t, [4, 4], rank);
      const { out, context } = await ring.forward(shard(x.q), shard(x.k), shard(x.v), { causal: true });
      const calls = group.stats().total.calls;
      await expect(other.backward(context, shard(x.dOut))).rejects.toThrow(/backward needs the \(unreleased\) context/);
      await expect(ring.backward(context, shardOf(x.dOut, [3, 5], rank))).rejects.toThrow(/does not match the forward output/);
      await expect(ring.forward(shard(x.q), shard(x.k), shard(x.v), { causal: true, seqLength: 10 })).rejects.toThrow(ParallelError);
      await expect(ring.forward(shard(x.q), shard(x.k), shard(x.v), { causal: true, sequenceDocuments: new Int32Array(7) })).rejects.toThrow(
        /sequenceDocuments must be an Int32Array of b \* N = 1 \* 8 = 8 ids, got 7/,
      );
      ring.release(context, out);
      await expect(ring.backward(context, shard(x.dOut))).rejects.toThrow(ParallelError);
      expect(group.stats().total.calls).toBe(calls);
    });
  });
});
