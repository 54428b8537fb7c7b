/**
 * The block on the worker-threads backend (P = 2 and 4, shared-memory
 * collectives) against the same block on one local rank: Ulysses (also
 * pipelined in chunks of heads), all-gather-KV and ring.
 */
import { createLocalGroups, launch } from "@ulysses/collectives";
import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import { maxRelativeError } from "@ulysses/kernels/testing";
import { evenSplitSizes, Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { joinShards, spBlock } from "./testing-fixtures/test-support.js";
import { testProblem, type TestRunArgs } from "./testing-fixtures/rank-entry.js";

type RankResult = { y: Float32Array; dx: Float32Array; flat: Float32Array; forwardBytes: number; allToAllBytes: number };

async function singleRank(args: TestRunArgs) {
  const { x, dy, weights } = testProblem(args);
  const [group] = createLocalGroups(1);
  const block = spBlock(args.config, group!, { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), weights });
  const { y, context } = await block.forward(x);
  const g = await block.backward(context, dy);
  return { y, dx: g.dx, flat: g.flat };
}

const runs: TestRunArgs[] = [
  { config: { hidden: 32, heads: 8, kvHeads: 2, mlp: "swiglu", norm: "rmsnorm", mlpRatio: 2 }, batch: 1, seq: 16, seed: 1, attention: "reference" },
  { config: { hidden: 24, heads: 6, mlpRatio: 2 }, batch: 2, seq: 10, seed: 2, attention: "reference", checkpoint: true },
  { config: { hidden: 16, heads: 4, mlpRatio: 2, attention: "allgather" }, batch: 1, seq: 12, seed: 3, attention: "reference" },
  { config: { hidden: 64, heads: 8, mlpRatio: 2 }, batch: 1, seq: 40, seed: 4, attention: "ort" },
  // ring past the head count (2 heads, 1 kv head on up to 4 ranks), uneven sequence; ring needs a kernel that reads the merged statistics
  { config: { hidden: 16, heads: 2, kvHeads: 1, mlpRatio: 2, attention: "ring" }, batch: 1, seq: 13, seed: 5, attention: "ort" },
  // Ulysses with its exchanges pipelined in 2 chunks of heads (exchanges in flight while the kernel runs), GQA, uneven sequence
  { config: { hidden: 64, heads: 8, kvHeads: 4, mlpRatio: 2 }, batch: 1, seq: 21, seed: 6, attention: "ort", pipelineChunks: 2 },
];

describe("TransformerBlock on the threads backend", () => {
  for (const p of [2, 4]) {
    it(`P = ${p}: outputs and gradients equal the single-rank run`, async () => {
      const world = await launch<{ run(args: TestRunArgs): Promise<RankResult> }>({
        worldSize: p,
        entry: new URL("./testing-fixtures/rank-entry.ts", import.meta.url),
        ortThreadsPerRank: 1,
        timeoutMs: 30_000,
      });
      try {
        for (const args of runs) {
          const expected = await singleRank(args);
          const ranks = await world.all("run", args);
          const sizes = evenSplitSizes(args.seq, p);
          // Each rank returns its [b, s_r, hidden] shard; join along the sequence.
          const join = (key: "y" | "dx") => joinShards(ranks.map((r, rank) => new Tensor("float32", [args.batch, sizes[rank]!, args.config.hidden], r[key])));
          const label = `${JSON.stringify(args.config)} (${args.attention})`;
          expect(maxRelativeError(join("y"), expected.y), `y ${label}`).toBeLessThanOrEqual(1e-5);
          expect(maxRelativeError(join("dx"), expected.dx), `dx ${label}`).toBeLessThanOrEqual(1e-5);
          for (const r of ranks) {
            const flat = new Tensor("float32", [r.flat.length], r.flat);
            expect(maxRelativeError(flat, new Tensor("float32", [expected.flat.length], expected.flat)), `grads ${label}`).toBeLessThanOrEqual(1e-5);
          }
        }
        const mha = runs[3]!;
        const expectedForward = (4 * (p - 1) * (mha.seq / p) * 8 * 8 * 4) / p;
        const ranks = await world.all("run", mha);
        for (const r of ranks) {
          expect(r.forwardBytes).toBe(expectedForward);
          expect(r.allToAllBytes).toBe(2 * expectedForward);
        }
      } finally {
        await world.shutdown();
      }
    });
  }
});
