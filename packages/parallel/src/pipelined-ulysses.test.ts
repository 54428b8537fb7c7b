/**
 * PipelinedUlyssesAttention against the single-rank ReferenceAttention on
 * the whole sequence (out, dq, dk, dv to 1e-5), its bytes against
 * ulyssesBytes of one chunk of heads times G, its exchanges posted ahead of the
 * kernel (recorded order of kernel calls and all-to-alls), and its checks.
 */
import { createLocalGroups, type ProcessGroup } from "@ulysses/collectives";
import { Gpt } from "@ulysses/model";
import {
  ReferenceOps,
  ReferenceAttention,
  type AttentionForwardResult,
  type AttentionGradients,
  type AttentionOptions,
  type LocalAttention,
} from "@ulysses/kernels";
import { maxRelativeError } from "@ulysses/kernels/testing";
import { evenSplitSizes, type Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { headRouting } from "./head-routing.js";
import { ParallelDims, parallelDimsProblems } from "./parallel-dims.js";
import { parallelize } from "./parallelize.js";
import { PipelinedUlyssesAttention } from "./pipelined-ulysses.js";
import { ulyssesBytes } from "./scheme-bytes.js";
import { attentionInputs, joinShards, runRanks, shardOf } from "./testing-fixtures/test-support.js";

type F32 = Tensor<"float32">;
const reference = new ReferenceAttention();

/** The reference kernel, logging its calls into `log`. */
class LoggingAttention implements LocalAttention {
  readonly name = "logging";
  constructor(private readonly log: string[]) {}
  forward(q: F32, k: F32, v: F32, options: AttentionOptions): Promise<AttentionForwardResult> {
    this.log.push("kernel");
    return reference.forward(q, k, v, options);
  }
  backward(q: F32, k: F32, v: F32, out: F32, dOut: F32, lse: F32, options: AttentionOptions): Promise<AttentionGradients> {
    this.log.push("kernel");
    return reference.backward(q, k, v, out, dOut, lse, options);
  }
  release(): void {}
}

/** `group` whose allToAll calls are logged into `log`. */
function logged(group: ProcessGroup, log: string[]): ProcessGroup {
  return new Proxy(group, {
    get(target, key, receiver) {
      const value = Reflect.get(target, key, receiver);
      if (key === "allToAll")
        return (...args: unknown[]) => {
          log.push("allToAll");
          return (value as (...a: unknown[]) => unknown).apply(target, args);
        };
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

const cases = [
  { name: "MHA 8 heads, 2 groups, P = 2 and 4", batch: 2, seq: 16, heads: 8, kvHeads: 8, headDim: 4, groups: 2, ranks: [2, 4] },
  { name: "GQA 8/4, 4 groups, P = 2, uneven N = 15", batch: 1, seq: 15, heads: 8, kvHeads: 4, headDim: 4, groups: 4, ranks: [2] },
  { name: "GQA 8/2, 2 groups, P = 4 (kv replicated within each group)", batch: 1, seq: 12, heads: 8, kvHeads: 2, headDim: 4, groups: 2, ranks: [4] },
];

describe("PipelinedUlyssesAttention equals single-rank ReferenceAttention", () => {
  for (const c of cases) {
    it(c.name, async () => {
      const x = attentionInputs(c, c.seq + c.groups);
      const want = await reference.forward(x.q, x.k, x.v, { causal: true });
      const grads = await reference.backward(x.q, x.k, x.v, want.out, x.dOut, want.logSumExp, { causal: true });
      for (const p of c.ranks) {
        const sizes = evenSplitSizes(c.seq, p);
        const routing = headRouting(c.heads / c.groups, c.kvHeads / c.groups, p);
        const perRank = await runRanks(p, async (group, rank) => {
          const attention = new PipelinedUlyssesAttention(reference, group, { chunks: c.groups });
          const shard = (t: F32) => shardOf(t, sizes, rank);
          const { out, context } = await attention.forward(shard(x.q), shard(x.k), shard(x.v), { causal: true, seqLength: c.seq });
          const forward = group.stats().total.bytesSent;
          const g = await attention.backward(context, shard(x.dOut));
          const bytes = [forward, group.stats().total.bytesSent - forward];
          const want = ulyssesBytes(routing, sizes, rank, c.batch, c.headDim);
          expect(bytes, `P=${p} rank ${rank} bytes`).toEqual([c.groups * want.forward, c.groups * want.backward]);
          return { out, ...g };
        });
        const join = (key: "out" | "dq" | "dk" | "dv") => joinShards(perRank.map((r) => r[key]));
        expect(maxRelativeError(join("out"), want.out), `out P=${p}`).toBeLessThanOrEqual(1e-5);
        expect(maxRelativeError(join("dq"), grads.dq), `dq P=${p}`).toBeLessThanOrEqual(1e-5);
        expect(maxRelativeError(join("dk"), grads.dk), `dk P=${p}`).toBeLessThanOrEqual(1e-5);
        expect(maxRelativeError(join("dv"), grads.dv), `dv P=${p}`).toBeLessThanOrEqual(1e-5);
      }
    });
  }

  it("posts group g + 1's exchange before group g's kernel, and group g's output exchange before group g + 1's kernel", async () => {
    const c = { batch: 1, seq: 8, heads: 6, kvHeads: 3, headDim: 4 };
    const x = attentionInputs(c, 3);
    const logs = await runRanks(2, async (group, rank) => {
      const log: string[] = [];
      const attention = new PipelinedUlyssesAttention(new LoggingAttention(log), logged(group, log), { chunks: 3 });
      const shard = (t: F32) => shardOf(t, [4, 4], rank);
      const { context } = await attention.forward(shard(x.q), shard(x.k), shard(x.v), { causal: true });
      log.push("|");
      await attention.backward(context, shard(x.dOut));
      return log.join(" ");
    });
    // in(0) in(1) kernel(0) out(0) in(2) kernel(1) out(1) kernel(2) out(2), the same backward
    const one = "allToAll allToAll kernel allToAll allToAll kernel allToAll kernel allToAll";
    expect(logs).toEqual([`${one} | ${one}`, `${one} | ${one}`]);
  });

  it("parallelize uses it when ParallelDims has pipelineChunks > 1", async () => {
    const config = { vocab: 16, hidden: 16, heads: 4, kvHeads: 2, layers: 1, mlp: "gelu" as const, mlpRatio: 2, maxSeq: 8, tiedHead: false };
    const kinds = await Promise.all(
      createLocalGroups(2).map(async (world) => {
        const dims = await ParallelDims.create(world, { sp: 2, pipelineChunks: 2 }, { heads: 4, kvHeads: 2, seqLength: 8 });
        const model = parallelize(new Gpt(config, { ops: new ReferenceOps(), localAttention: reference, seed: 1 }), dims);
        return model.attention[0]!.name;
      }),
    );
    expect(kinds).toEqual(["ulysses(reference, P=2, 2 chunks of heads pipelined)", "ulysses(reference, P=2, 2 chunks of heads pipelined)"]);
  });

  it("checks the chunks: they divide heads and kv heads and leave every rank a head of each chunk", async () => {
    await runRanks(2, async (group) => {
      expect(() => new PipelinedUlyssesAttention(reference, group, { chunks: 0 })).toThrow(/chunks must be a positive integer, got 0/);
      const a = new PipelinedUlyssesAttention(reference, group, { chunks: 2 });
      expect(() => a.checkHeads(6, 3)).toThrow(/2 chunks must divide heads \(6\) and kvHeads \(3\)/);
      expect(() => a.checkHeads(2, 2)).toThrow(/1 heads cannot be split over 2 ranks/);
      expect(() => a.checkHeads(8, 2)).not.toThrow();
    });
    const shape = { worldSize: 4, heads: 8, kvHeads: 2, seqLength: 16 };
    expect(parallelDimsProblems({ sp: 4, pipelineChunks: 2 }, shape)).toEqual([]);
    expect(parallelDimsProblems({ sp: 4, pipelineChunks: 4 }, shape)).toEqual(["pipelineChunks 4 must divide heads 8 and the kv heads 2"]);
    expect(parallelDimsProblems({ sp: 4, pipelineChunks: 2 }, { ...shape, heads: 4 })).toEqual([
      "heads 4 / pipelineChunks 2 = 2 heads per chunk is fewer than sp 4: every rank needs a head of each chunk",
    ]);
    expect(parallelDimsProblems({ sp: 4, attention: "ring", pipelineChunks: 2 }, shape)).toEqual([
      "pipelineChunks 2 pipelines Ulysses' exchanges; attention is ring",
    ]);
  });
});
