import { ReferenceAttention, StatsReferenceAttention, type AttentionOptions, type LocalAttention } from "@ulysses/kernels";
import { maxRelativeError, randomTensor, seededRandom } from "@ulysses/kernels/testing";
import type { ProcessGroup } from "@ulysses/collectives";
import { evenSplitSizes, type Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { AllGatherKVAttention } from "./allgather-kv-attention.js";
import { ParallelError } from "./errors.js";
import { RingAttention } from "./ring-attention.js";
import type { ShardedAttention } from "./sharded-attention.js";
import { joinShards, runRanks, shardOf } from "./testing-fixtures/test-support.js";
import { attentionInputs } from "./testing-fixtures/test-support.js";
import { headRouting } from "./head-routing.js";
import { PipelinedUlyssesAttention } from "./pipelined-ulysses.js";
import { allGatherKVBytes, ulyssesBytes } from "./scheme-bytes.js";
import { UlyssesAttention } from "./ulysses-attention.js";

type F32 = Tensor<"float32">;
type Kind = "ulysses" | "ulysses-chunked" | "allgather" | "ring";

interface Case {
  name: string;
  batch: number;
  seq: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  causal: boolean;
  ranks: number[];
}

const reference = new ReferenceAttention();
// ring's local backward must read the merged lse and out it is given (ReferenceAttention is refused for P > 1)
const stats = new StatsReferenceAttention();

function wrap(kind: Kind, group: ProcessGroup): ShardedAttention {
  if (kind === "ring") return new RingAttention(stats, group);
  // every exchange in all-to-alls of at most 64 bytes a side (a few tokens each)
  if (kind === "ulysses-chunked") return new UlyssesAttention(reference, group, { exchangeChunkBytes: 64 });
  return kind === "ulysses" ? new UlyssesAttention(reference, group) : new AllGatherKVAttention(reference, group);
}

const inputs = attentionInputs;

/** Runs the wrapper on `p` ranks and joins the shards of out, dq, dk, dv. */
async function runSharded(kind: Kind, p: number, c: Case, x: ReturnType<typeof inputs>) {
  const sizes = evenSplitSizes(c.seq, p);
  const perRank = await runRanks(p, async (group, rank) => {
    const attention = wrap(kind, group);
    const shard = (t: F32) => shardOf(t, sizes, rank);
    const { out, context } = await attention.forward(shard(x.q), shard(x.k), shard(x.v), { causal: c.causal, seqLength: c.seq });
    const grads = await attention.backward(context, shard(x.dOut));
    return { out, ...grads };
  });
  const join = (key: "out" | "dq" | "dk" | "dv") => joinShards(perRank.map((r) => r[key]));
  return { out: join("out"), dq: join("dq"), dk: join("dk"), dv: join("dv") };
}

const cases: Case[] = [
  { name: "MHA causal", batch: 2, seq: 24, heads: 4, kvHeads: 4, headDim: 8, causal: true, ranks: [1, 2, 3, 4] },
  { name: "MHA headDim 32 (long copy runs)", batch: 1, seq: 8, heads: 4, kvHeads: 4, headDim: 32, causal: true, ranks: [1, 2] },
  { name: "MHA non-causal", batch: 1, seq: 12, heads: 4, kvHeads: 4, headDim: 4, causal: false, ranks: [2, 4] },
  { name: "GQA kv=2 (replicated on P=4)", batch: 1, seq: 16, heads: 8, kvHeads: 2, headDim: 4, causal: true, ranks: [1, 2, 4] },
  { name: "uneven heads 6 on 4", batch: 1, seq: 16, heads: 6, kvHeads: 6, headDim: 4, causal: true, ranks: [3, 4] },
  { name: "uneven heads with GQA 6/2 on 4", batch: 2, seq: 8, heads: 6, kvHeads: 2, headDim: 4, causal: true, ranks: [4] },
  { name: "q ranges straddling kv groups 8/2 on 3", batch: 1, seq: 12, heads: 8, kvHeads: 2, headDim: 4, causal: true, ranks: [3] },
  { name: "uneven sequence 10 on 3 and 4, batch 2", batch: 2, seq: 10, heads: 4, kvHeads: 2, headDim: 4, causal: true, ranks: [3, 4] },
  { name: "uneven sequence N=1000 on 3", batch: 1, seq: 1000, heads: 3, kvHeads: 3, headDim: 4, causal: true, ranks: [3] },
];

describe.each(["ulysses", "ulysses-chunked", "allgather", "ring"] as const)("%s attention equals single-rank ReferenceAttention", (kind) => {
  for (const c of cases) {
    it(`${c.name} (P = ${c.ranks.join(", ")})`, async () => {
      const x = inputs(c, c.seq * 31 + c.heads);
      const expected = await reference.forward(x.q, x.k, x.v, { causal: c.causal });
      const grads = await reference.backward(x.q, x.k, x.v, expected.out, x.dOut, expected.logSumExp, { causal: c.causal });
      for (const p of c.ranks) {
        const got = await runSharded(kind, p, c, x);
        expect(maxRelativeError(got.out, expected.out), `out P=${p}`).toBeLessThanOrEqual(1e-5);
        expect(maxRelativeError(got.dq, grads.dq), `dq P=${p}`).toBeLessThanOrEqual(1e-5);
        expect(maxRelativeError(got.dk, grads.dk), `dk P=${p}`).toBeLessThanOrEqual(1e-5);
        expect(maxRelativeError(got.dv, grads.dv), `dv P=${p}`).toBeLessThanOrEqual(1e-5);
      }
    });
  }
});

describe("which local calls may block the calling thread (AttentionOptions.onCallerThread)", () => {
  /** Delegates to `inner`, recording each call's onCallerThread. */
  const recording = (inner: LocalAttention, seen: string[]): LocalAttention => ({
    name: inner.name,
    forward: (q, k, v, options: AttentionOptions) => {
      seen.push(`forward ${String(options.onCallerThread)}`);
      return inner.forward(q, k, v, options);
    },
    backward: (q, k, v, out, dOut, lse, options: AttentionOptions) => {
      seen.push(`backward ${String(options.onCallerThread)}`);
      return inner.backward(q, k, v, out, dOut, lse, options);
    },
    release: () => inner.release(),
  });
  const c: Case = { name: "", batch: 1, seq: 16, heads: 4, kvHeads: 4, headDim: 4, causal: true, ranks: [] };
  const x = inputs(c, 5);
  const calls = (make: (local: LocalAttention, group: ProcessGroup) => ShardedAttention, local: LocalAttention) =>
    runRanks(2, async (group, rank) => {
      const seen: string[] = [];
      const attention = make(recording(local, seen), group);
      const shard = (t: F32) => shardOf(t, evenSplitSizes(c.seq, 2), rank);
      const { context } = await attention.forward(shard(x.q), shard(x.k), shard(x.v), { causal: true, seqLength: c.seq });
      await attention.backward(context, shard(x.dOut));
      return [...new Set(seen)];
    });

  it("Ulysses and all-gather-KV, whose exchanges are done before the kernel starts, say it may; ring and pipelined Ulysses, which overlap it, do not", async () => {
    for (const ranks of [await calls((l, g) => new UlyssesAttention(l, g), reference), await calls((l, g) => new AllGatherKVAttention(l, g), reference)]) {
      for (const seen of ranks) expect(seen).toEqual(["forward true", "backward true"]);
    }
    for (const ranks of [
      await calls((l, g) => new RingAttention(l, g), stats),
      await calls((l, g) => new PipelinedUlyssesAttention(l, g, { chunks: 2 }), reference),
    ]) {
      for (const seen of ranks) expect(seen).toEqual(["forward undefined", "backward undefined"]);
    }
  });
});

describe("communication accounting", () => {
  /** Each rank's collective stats after the forward and after the backward of one `kind` wrapper on P ranks. */
  const accounting = (kind: Kind, c: Case, x: ReturnType<typeof inputs>, p: number) =>
    runRanks(p, async (group, rank) => {
      const attention = wrap(kind, group);
      const shard = (t: F32) => shardOf(t, evenSplitSizes(c.seq, p), rank);
      const { context } = await attention.forward(shard(x.q), shard(x.k), shard(x.v), { causal: true, seqLength: c.seq });
      const forward = group.stats();
      await attention.backward(context, shard(x.dOut));
      return { forward, step: group.stats() };
    });

  it("Ulysses sends 4·(P−1)/P·(N/P)·H·D·4 bytes per rank forward, the same again backward", async () => {
    const c: Case = { name: "", batch: 1, seq: 32, heads: 8, kvHeads: 8, headDim: 4, causal: true, ranks: [] };
    const x = inputs(c, 7);
    for (const p of [2, 4]) {
      const perRank = (await accounting("ulysses", c, x, p)).map((r) => ({
        forward: r.forward.total.bytesSent,
        total: r.step.total.bytesSent,
        calls: r.step.byOp.allToAll.calls,
      }));
      const expected = (4 * (p - 1) * (c.seq / p) * c.heads * c.headDim * 4) / p;
      for (const r of perRank) {
        expect(r.forward).toBe(expected);
        expect(r.total).toBe(2 * expected);
        expect(r.calls).toBe(4);
      }
    }
  });

  it("Ulysses with kv heads replicated (8 q, 2 kv heads, P = 4) sends each rank's 2 q heads and 1 kv copy per peer", async () => {
    const c: Case = { name: "", batch: 1, seq: 16, heads: 8, kvHeads: 2, headDim: 4, causal: true, ranks: [] };
    const x = inputs(c, 8);
    const p = 4;
    const perRank = (await accounting("ulysses", c, x, p)).map((r) => ({ forward: r.forward.total.bytesSent, total: r.step.total.bytesSent }));
    // To each of 3 peers, 4 tokens of: q (2 heads) + k (1) + v (1) forward, out (2 heads) back; D = 4 floats.
    const expected = 3 * 4 * (2 + 1 + 1 + 2) * 4 * 4;
    for (const r of perRank) {
      expect(r.forward).toBe(expected);
      expect(r.total).toBe(2 * expected);
    }
  });

  it("all-gather-KV sends (P−1)·(N/P)·2·b·Hkv·D·4 bytes per rank forward (allGather) and its reduce-scatter backward", async () => {
    const c: Case = { name: "", batch: 2, seq: 24, heads: 4, kvHeads: 2, headDim: 4, causal: true, ranks: [] };
    const x = inputs(c, 9);
    for (const p of [2, 3, 4]) {
      const perRank = (await accounting("allgather", c, x, p)).map((r) => ({
        forward: r.forward.byOp.allGather.bytesSent,
        backward: r.step.byOp.reduceScatter.bytesSent,
        total: r.step.total.bytesSent,
      }));
      const kvBytes = (c.seq / p) * 2 * c.batch * c.kvHeads * c.headDim * 4;
      for (const r of perRank) {
        expect(r.forward).toBe((p - 1) * kvBytes);
        expect(r.backward).toBe((p - 1) * kvBytes);
        expect(r.total).toBe(2 * (p - 1) * kvBytes);
      }
    }
  });
});

describe("byte formulas (scheme-bytes.ts) on uneven shards and heads", () => {
  it("ulyssesBytes and allGatherKVBytes equal every rank's counted bytes: N = 10 on 3 and 4, 6 heads / 2 kv heads, batch 2", async () => {
    const c: Case = { name: "", batch: 2, seq: 10, heads: 6, kvHeads: 2, headDim: 4, causal: true, ranks: [] };
    const x = inputs(c, 21);
    for (const p of [3, 4]) {
      const sizes = evenSplitSizes(c.seq, p);
      const routing = headRouting(c.heads, c.kvHeads, p);
      const formulas = {
        ulysses: (rank: number) => ulyssesBytes(routing, sizes, rank, c.batch, c.headDim),
        allgather: (rank: number) => allGatherKVBytes(sizes, rank, c.batch, c.kvHeads, c.headDim),
      };
      for (const kind of ["ulysses", "allgather"] as const) {
        const counted = await runRanks(p, async (group, rank) => {
          const attention = wrap(kind, group);
          const shard = (t: F32) => shardOf(t, sizes, rank);
          const { context } = await attention.forward(shard(x.q), shard(x.k), shard(x.v), { causal: true, seqLength: c.seq });
          const forward = group.stats().total.bytesSent;
          await attention.backward(context, shard(x.dOut));
          return [forward, group.stats().total.bytesSent - forward];
        });
        counted.forEach((got, rank) => {
          const want = formulas[kind](rank);
          expect(got, `${kind} P=${p} rank ${rank}`).toEqual([want.forward, want.backward]);
        });
      }
    }
  });
});

describe("configuration errors", () => {
  it("fails before any communication when P exceeds the query heads or heads % kvHeads != 0", async () => {
    const c: Case = { name: "", batch: 1, seq: 10, heads: 4, kvHeads: 4, headDim: 4, causal: true, ranks: [] };
    const x = inputs(c, 1);
    const results = await runRanks(5, async (group, rank) => {
      const attention = new UlyssesAttention(reference, group);
      const shard = (t: F32) => shardOf(t, evenSplitSizes(c.seq, 5), rank);
      const error = await attention.forward(shard(x.q), shard(x.k), shard(x.v), { causal: true }).catch((e: unknown) => e);
      return { error, calls: group.stats().total.calls };
    });
    for (const r of results) {
      expect(r.error).toBeInstanceOf(ParallelError);
      expect(String(r.error)).toMatch(/4 heads cannot be split over 5 ranks/);
      expect(r.calls).toBe(0);
    }
    await runRanks(2, async (group) => {
      const random = seededRandom(3);
      const q = randomTensor([1, 4, 6, 4], random);
      const kv = randomTensor([1, 4, 4, 4], random);
      for (const attention of [new UlyssesAttention(reference, group), new AllGatherKVAttention(reference, group)]) {
        await expect(attention.forward(q, kv, kv, { causal: true })).rejects.toThrow(/heads \(6\) must be a multiple of kvHeads \(4\)/);
      }
      expect(group.stats().total.calls).toBe(0);
    });
  });

  it("rejects k, v holding another sequence shard than q, naming both shapes", async () => {
    await runRanks(2, async (group) => {
      const random = seededRandom(5);
      const q = randomTensor([1, 4, 2, 4], random);
      const kv = randomTensor([1, 3, 2, 4], random);
      for (const attention of [new UlyssesAttention(reference, group), new AllGatherKVAttention(reference, group)]) {
        const error = await attention.forward(q, kv, kv, { causal: true }).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(ParallelError);
        expect(String(error)).toMatch(/k and v \[1, 3, 2, 4\] hold 3 tokens but q \[1, 4, 2, 4\] holds 4/);
      }
      expect(group.stats().total.calls).toBe(0);
    });
  });

  it("rejects a shard length that does not match the global sequence", async () => {
    await runRanks(2, async (group) => {
      const random = seededRandom(4);
      const q = randomTensor([1, 5, 2, 4], random);
      await expect(new UlyssesAttention(reference, group).forward(q, q, q, { causal: true, seqLength: 12 })).rejects.toThrow(ParallelError);
      expect(() => new UlyssesAttention(reference, group, { exchangeChunkBytes: -4 })).toThrow(
        `ulysses(reference, P=${group.size}) exchangeChunkBytes: the exchange chunk size must be a positive integer of bytes, got -4`,
      );
      expect(group.stats().total.calls).toBe(0);
    });
  });
});
