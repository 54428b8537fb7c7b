/**
 * One model definition, parallelised from outside: the one-device Gpt (no
 * group at all) trained for some steps, against the same model after
 * `parallelize` at SP 2 and 4 (uneven shards), ZeRO-1, a tied head,
 * all-gather attention and activation checkpointing; ring and hybrid
 * attention (zigzag and contiguous) for MHA, GQA and MQA with losses,
 * gradients of every step and final logits; releases bit for bit
 * (PoisoningOps). The ZeRO stages are zero-equivalence.test.ts.
 */
import { StatsReferenceAttention } from "@ulysses/kernels";
import { PoisoningOps } from "@ulysses/kernels/testing";
import type { GptConfig } from "@ulysses/model";
import type { SequenceParallelKind } from "@ulysses/parallel";
import { describe, expect, it } from "vitest";
import { maxRelative, normRelative } from "./testing-fixtures/compare.js";
import { config, train, type Options } from "./testing-fixtures/sp-train.js";

describe("sequence-parallel equivalence (local backend, reference kernels)", () => {
  it("10 steps of the one-device Gpt (no group) equal the same model parallelised at SP 2 and 4 within 1e-5", async () => {
    const single = await train(null, { steps: 10 });
    expect(single.losses[9]!).toBeLessThan(single.losses[0]!);
    for (const sp of [2, 4]) {
      const parallel = await train(sp, { steps: 10 });
      single.losses.forEach((loss, step) => expect(Math.abs(parallel.losses[step]! - loss) / loss, `sp ${sp} step ${step}`).toBeLessThanOrEqual(1e-5));
      expect(maxRelative(parallel.weights, single.weights), `weights at sp ${sp}`).toBeLessThanOrEqual(1e-5);
    }
  });

  it("SP=2 and SP=4 (uneven shards) train like SP=1: losses and weights within 1e-4", async () => {
    const single = await train(1);
    expect(single.losses[19]!).toBeLessThan(single.losses[0]!);
    for (const sp of [2, 4]) {
      const parallel = await train(sp);
      single.losses.forEach((loss, step) => expect(Math.abs(parallel.losses[step]! - loss) / loss, `sp ${sp} step ${step}`).toBeLessThanOrEqual(1e-4));
      expect(maxRelative(parallel.weights, single.weights)).toBeLessThanOrEqual(1e-4);
    }
  });

  it("a Qwen3-shaped model (head width 6 on hidden 16, per-head q/k norms, q/k/v biases) trains at SP 2 like one device", async () => {
    const model: Partial<GptConfig> = { headDim: 6, qkNorm: true, attentionBias: "qkv", mlp: "swiglu", norm: "rmsnorm" };
    const single = await train(null, { steps: 10, model });
    expect(single.losses[9]!).toBeLessThan(single.losses[0]!);
    for (const options of [{}, { checkpointing: true, attention: "allgather" as const }]) {
      const parallel = await train(2, { steps: 10, model, ...options });
      single.losses.forEach((loss, step) => expect(Math.abs(parallel.losses[step]! - loss) / loss, `step ${step}`).toBeLessThanOrEqual(1e-5));
      expect(maxRelative(parallel.weights, single.weights)).toBeLessThanOrEqual(1e-5);
    }
  });

  it("ZeRO-1, a tied head, all-gather attention and activation checkpointing keep the equivalence", async () => {
    const single = await train(null, { tiedHead: true });
    for (const options of [{ zero: 1 as const, attention: "allgather" as const }, { checkpointing: true }]) {
      const sharded = await train(2, { tiedHead: true, ...options });
      single.losses.forEach((loss, step) => expect(Math.abs(sharded.losses[step]! - loss) / loss).toBeLessThanOrEqual(1e-4));
      expect(maxRelative(sharded.weights, single.weights)).toBeLessThanOrEqual(1e-4);
    }
  });
});

// Losses and logits: max |a − b| / max |b| <= 1e-5; each step's whole gradient vector: ||a − b|| / ||b|| <= 1e-5 (its largest
// element differences reach 1e-5 of its largest element at some steps: float32 sums in another order, then 20 Adam steps);
// weights 2e-5 in the max metric: Adam divides each update by the root of the gradient's second moment, so a weight whose
// gradient is float32 noise in both runs moves by a rounding-sized difference times lr / sqrt(v).
describe("ring and hybrid attention train like one rank (losses, every step's gradients and final logits within 1e-5)", () => {
  const stats = () => new StatsReferenceAttention();
  const cases: { name: string; sp: number; attention: SequenceParallelKind; dims?: Options["dims"] }[] = [
    { name: "ring P = 2 (zigzag)", sp: 2, attention: "ring" },
    { name: "ring P = 4 (zigzag)", sp: 4, attention: "ring" },
    { name: "ring P = 4 (contiguous)", sp: 4, attention: "ring", dims: { layout: "contiguous" } },
    { name: "hybrid 2x2 (zigzag)", sp: 4, attention: "hybrid", dims: { ulyssesDegree: 2, ringDegree: 2 } },
    { name: "hybrid 2x2 (contiguous)", sp: 4, attention: "hybrid", dims: { ulyssesDegree: 2, ringDegree: 2, layout: "contiguous" } },
    { name: "hybrid 1x4 (zigzag)", sp: 4, attention: "hybrid", dims: { ulyssesDegree: 1, ringDegree: 4 } },
    { name: "hybrid 4x1", sp: 4, attention: "hybrid", dims: { ulyssesDegree: 4, ringDegree: 1 } },
  ];
  for (const kvHeads of [4, 2, 1]) {
    it(`kv heads ${kvHeads} (of 4), 22 tokens (not divisible by 2P): ${cases.map((c) => c.name).join(", ")}`, async () => {
      const single = await train(null, { kvHeads, local: stats, record: true });
      expect(single.losses[19]!).toBeLessThan(single.losses[0]!);
      for (const c of cases) {
        const got = await train(c.sp, { kvHeads, local: stats, record: true, attention: c.attention, dims: c.dims });
        single.losses.forEach((loss, step) => expect(Math.abs(got.losses[step]! - loss) / loss, `${c.name} loss ${step}`).toBeLessThanOrEqual(1e-5));
        single.grads.forEach((g, step) => expect(normRelative(got.grads[step]!, g), `${c.name} gradients ${step}`).toBeLessThanOrEqual(1e-5));
        expect(maxRelative(got.logits!, single.logits!), `${c.name} logits`).toBeLessThanOrEqual(1e-5);
        expect(maxRelative(got.weights, single.weights), `${c.name} weights`).toBeLessThanOrEqual(2e-5);
      }
    });
  }
});

// BlockOps.release under every sequence-parallel attention: PoisoningOps overwrites each released tensor with NaN on the
// spot, so a released tensor that something still reads (a rank's shard, a saved activation, an exchange's input) changes
// the results; they must be ReferenceOps' bit for bit.
describe("releases under sequence parallelism: PoisoningOps train as ReferenceOps, bit for bit", () => {
  const stats = () => new StatsReferenceAttention();
  const cases: { name: string; sp: number; options: Options }[] = [
    { name: "Ulysses SP 2", sp: 2, options: {} },
    { name: "Ulysses SP 2, checkpointing, ZeRO-1, tied head", sp: 2, options: { checkpointing: true, zero: 1, tiedHead: true } },
    { name: "Ulysses SP 2, ZeRO-2 and shared weights, tied head", sp: 2, options: { zero: 2, shared: true, tiedHead: true } },
    {
      name: "Ulysses SP 2, ZeRO-3, checkpointing, loss tiles of 5 rows, tied head",
      sp: 2,
      options: { zero: 3, checkpointing: true, lossTileRows: 5, tiedHead: true },
    },
    { name: "Ulysses SP 2, loss tiles of 5 rows, MLP tiles of 4 rows", sp: 2, options: { lossTileRows: 5, mlpTileRows: 4 } },
    { name: "Ulysses SP 1 (its context keeps the block's q, k, v), loss and MLP tiles", sp: 1, options: { lossTileRows: 5, mlpTileRows: 4 } },
    { name: "all-gather SP 2", sp: 2, options: { attention: "allgather" } },
    { name: "ring P = 2", sp: 2, options: { attention: "ring", local: stats } },
    {
      name: "hybrid 2x2, checkpointing",
      sp: 4,
      options: { attention: "hybrid", local: stats, checkpointing: true, dims: { ulyssesDegree: 2, ringDegree: 2 } },
    },
  ];
  for (const c of cases) {
    it(c.name, async () => {
      const want = await train(c.sp, { steps: 4, ...c.options });
      const ops = new PoisoningOps();
      const got = await train(c.sp, { steps: 4, ...c.options, ops });
      expect(got.losses).toEqual(want.losses);
      expect([...got.weights]).toEqual([...want.weights]);
      expect(ops.released.length).toBeGreaterThan(0);
    });
  }

  it("Ulysses at SP 2 saves exchanged copies, so each block gives its rotated k and its v back after forward; SP 1 keeps them", async () => {
    // tensors [b, s, kvHeads, D] released per rank: k before its rotation at both degrees, and at SP 2 also the rotated k and v
    const kvReleases = async (sp: number) => {
      const ops = new PoisoningOps();
      await train(sp, { steps: 2, ops });
      return ops.released.filter((t) => t.rank === 4 && t.shape[2] === config.kvHeads).length / sp;
    };
    const one = await kvReleases(1);
    expect(one).toBeGreaterThan(0);
    expect(await kvReleases(2)).toBe(one + 2 * config.layers * 2);
  });
});

// ZeRO changes where the sums are made and who updates which weights, not what they are: every stage trains as ZeRO-0 over 20
// steps. The blocks' gradients under ZeRO-2 are reduce-scattered as the backward makes them, the others' in two flushes (before
// the blocks' backward and after it), and the held buffer is gone while the blocks run backward (lossPhaseGradients).
