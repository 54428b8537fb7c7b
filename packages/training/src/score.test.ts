/**
 * scoreTokens: each token's log-probability, against a float64 log-softmax
 * of the one-device model's untiled logits computed here, and sequence
 * parallel (Ulysses, ring with zigzag shards, hybrid 2 x 2) against the
 * one-device scores.
 */
import { createLocalGroups } from "@ulysses/collectives";
import { ReferenceOps, StatsReferenceAttention } from "@ulysses/kernels";
import { Gpt, type GptConfig } from "@ulysses/model";
import { ParallelDims, parallelize, type ParallelDimsOptions } from "@ulysses/parallel";
import { Rng, Tensor } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { scoreTokens } from "./score.js";

const config: GptConfig = { vocab: 40, hidden: 16, heads: 4, kvHeads: 2, layers: 2, mlp: "swiglu", mlpRatio: 2, maxSeq: 64, tiedHead: true, norm: "rmsnorm" };
const N = 24;
const ops = new ReferenceOps();
const model = () => new Gpt(config, { ops, localAttention: new StatsReferenceAttention(), seed: 5 });

function text(): Int32Array {
  const rng = new Rng(3);
  return Int32Array.from({ length: N }, () => Math.floor(rng.uniform() * config.vocab));
}

/** log p(tokens[i + 1] | ..) from the untiled logits, in float64 here. */
async function expected(tokens: Int32Array): Promise<number[]> {
  const gpt = model();
  const context = await gpt.forward(new Tensor("int32", [1, N], tokens.slice()));
  const logits = context.logits.data;
  gpt.release(context);
  const out: number[] = [];
  for (let i = 0; i < N - 1; i++) {
    const row = Array.from(logits.subarray(i * config.vocab, (i + 1) * config.vocab), Number);
    const max = Math.max(...row);
    const lse = max + Math.log(row.reduce((s, v) => s + Math.exp(v - max), 0));
    out.push(row[tokens[i + 1]!]! - lse);
  }
  return out;
}

async function parallelScores(sp: number, options: Omit<ParallelDimsOptions, "sp">, tokens: Int32Array): Promise<Float64Array[]> {
  return Promise.all(
    createLocalGroups(sp).map(async (world) => {
      const dims = await ParallelDims.create(world, { sp, ...options }, { heads: config.heads, kvHeads: config.kvHeads, seqLength: N });
      return (await scoreTokens(parallelize(model(), dims), ops, tokens, 5)).logProbs;
    }),
  );
}

describe("scoreTokens", () => {
  it("one device, tiles of 5 rows: the float64 log-softmax of the untiled logits, and perplexity = exp(-mean)", async () => {
    const tokens = text();
    const want = await expected(tokens);
    const got = await scoreTokens(model(), ops, tokens, 5);
    expect(got.logProbs.length).toBe(N - 1);
    want.forEach((w, i) => expect(Math.abs(got.logProbs[i]! - w), `token ${i}`).toBeLessThan(1e-5));
    const mean = want.reduce((s, v) => s + v, 0) / want.length;
    expect(Math.abs(got.perplexity - Math.exp(-mean)) / Math.exp(-mean)).toBeLessThan(1e-5);
  });

  it("Ulysses SP 2, ring SP 2 (zigzag) and hybrid 2 x 2 give every rank the one-device scores", async () => {
    const tokens = text();
    const single = (await scoreTokens(model(), ops, tokens, 7)).logProbs;
    const layouts: [number, Omit<ParallelDimsOptions, "sp">][] = [
      [2, { attention: "ulysses" }],
      [2, { attention: "ring", layout: "zigzag" }],
      [4, { attention: "hybrid", ulyssesDegree: 2, ringDegree: 2 }],
    ];
    for (const [sp, options] of layouts) {
      for (const scores of await parallelScores(sp, options, tokens)) {
        single.forEach((s, i) => expect(Math.abs(scores[i]! - s), `${options.attention} sp ${sp} token ${i}`).toBeLessThan(1e-5));
      }
    }
  });
});
