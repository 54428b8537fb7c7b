import { afterAll, describe, expect, it } from "vitest";
import { Tensor } from "@ulysses/tensors";
import { SessionCache } from "../runtime/session-cache.js";
import { ReferenceAttention } from "../reference/attention.js";
import { OrtAttention } from "./ort-attention.js";

/** Deterministic uniform values in [-amplitude, amplitude). */
function randomTensor(shape: number[], seed: number, amplitude = 1): Tensor<"float32"> {
  let state = seed >>> 0;
  const t = new Tensor("float32", shape);
  for (let i = 0; i < t.size; i++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    t.data[i] = (state / 2 ** 31 - 1) * amplitude;
  }
  return t;
}

/** Relative error in the Frobenius norm: ||a - b|| / ||b||. */
function relativeError(a: Tensor<"float32">, b: Tensor<"float32">): number {
  expect(a.shape).toEqual(b.shape);
  let diff = 0;
  let norm = 0;
  for (let i = 0; i < a.size; i++) {
    diff += (a.data[i]! - b.data[i]!) ** 2;
    norm += b.data[i]! ** 2;
  }
  return Math.sqrt(diff) / Math.sqrt(norm);
}

/** logSumExp: -Infinity must match exactly; the finite entries compared like the others. */
function lseError(a: Tensor<"float32">, b: Tensor<"float32">): number {
  const finite = (t: Tensor<"float32">) =>
    new Tensor(
      "float32",
      [t.size],
      t.data.map((x) => (Number.isFinite(x) ? x : 0)),
    );
  for (let i = 0; i < a.size; i++) expect(Number.isFinite(a.data[i]!)).toBe(Number.isFinite(b.data[i]!));
  return relativeError(finite(a), finite(b));
}

interface Case {
  name: string;
  batch: number;
  seqQ: number;
  seqK: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  causal: boolean;
  scale?: number;
  /** Rows per run and keys per backward tile; "default" uses block-sizes.ts (else 32 and 24, so short sequences span several blocks and tiles). */
  blockRows?: number | "default";
}

// blockRows 32 with group 1 gives 32-query blocks: 31/32/33 sit at a block boundary.
const cases: Case[] = [
  { name: "non-causal MHA, 37", batch: 1, seqQ: 37, seqK: 37, heads: 2, kvHeads: 2, headDim: 16, causal: false },
  { name: "causal MHA, 100", batch: 1, seqQ: 100, seqK: 100, heads: 2, kvHeads: 2, headDim: 16, causal: true },
  { name: "causal GQA 4:2, 129", batch: 1, seqQ: 129, seqK: 129, heads: 4, kvHeads: 2, headDim: 8, causal: true },
  { name: "non-causal GQA 4:1, 100", batch: 1, seqQ: 100, seqK: 100, heads: 4, kvHeads: 1, headDim: 8, causal: false },
  { name: "causal GQA 4:1, batch 2", batch: 2, seqQ: 45, seqK: 45, heads: 4, kvHeads: 1, headDim: 8, causal: true },
  { name: "causal seqQ < seqK", batch: 2, seqQ: 37, seqK: 100, heads: 2, kvHeads: 1, headDim: 16, causal: true },
  { name: "causal seqQ > seqK (queries without keys)", batch: 1, seqQ: 100, seqK: 37, heads: 2, kvHeads: 2, headDim: 16, causal: true },
  { name: "non-causal seqQ != seqK, custom scale", batch: 2, seqQ: 29, seqK: 71, heads: 2, kvHeads: 2, headDim: 16, causal: false, scale: 0.3 },
  ...[31, 32, 33].flatMap((n) =>
    [false, true].map((causal) => ({
      name: `${causal ? "causal" : "non-causal"} block boundary ${n}`,
      batch: 1,
      seqQ: n,
      seqK: n,
      heads: 2,
      kvHeads: 2,
      headDim: 16,
      causal,
      blockRows: 32,
    })),
  ),
  { name: "causal GQA 4:2 block boundary 65, 16-row blocks", batch: 1, seqQ: 65, seqK: 65, heads: 4, kvHeads: 2, headDim: 8, causal: true, blockRows: 32 },
  { name: "causal headDim 64, 700, default blocks", batch: 1, seqQ: 700, seqK: 700, heads: 2, kvHeads: 2, headDim: 64, causal: true, blockRows: "default" },
  { name: "non-causal GQA 4:2, 600, default blocks", batch: 1, seqQ: 600, seqK: 600, heads: 4, kvHeads: 2, headDim: 32, causal: false, blockRows: "default" },
];

const TOLERANCE = 1e-5;

describe("OrtAttention matches ReferenceAttention (relative Frobenius error <= 1e-5)", () => {
  const cache = new SessionCache({ intraOpThreads: 1 });
  // Two threads without spinning for the batch > 1 case: the other thread count and option work too.
  const twoThreads = new SessionCache({ intraOpThreads: 2, allowSpinning: false });
  const reference = new ReferenceAttention();
  afterAll(() => Promise.all([cache.release(), twoThreads.release()]));

  for (const c of cases) {
    it(c.name, async () => {
      const runtime = c.batch > 1 ? twoThreads : cache;
      const attention =
        c.blockRows === "default" ? new OrtAttention({ cache: runtime }) : new OrtAttention({ cache: runtime, blockRows: c.blockRows ?? 32, tileKeys: 24 });
      const q = randomTensor([c.batch, c.seqQ, c.heads, c.headDim], 1, 1.5);
      const k = randomTensor([c.batch, c.seqK, c.kvHeads, c.headDim], 2, 1.5);
      const v = randomTensor([c.batch, c.seqK, c.kvHeads, c.headDim], 3);
      const dOut = randomTensor([c.batch, c.seqQ, c.heads, c.headDim], 4);
      const options = { causal: c.causal, scale: c.scale };
      const mine = await attention.forward(q, k, v, options);
      const want = await reference.forward(q, k, v, options);
      expect(relativeError(mine.out, want.out)).toBeLessThanOrEqual(TOLERANCE);
      expect(lseError(mine.logSumExp, want.logSumExp)).toBeLessThanOrEqual(TOLERANCE);
      const grads = await attention.backward(q, k, v, mine.out, dOut, mine.logSumExp, options);
      const wantGrads = await reference.backward(q, k, v, want.out, dOut, want.logSumExp, options);
      expect(relativeError(grads.dq, wantGrads.dq)).toBeLessThanOrEqual(TOLERANCE);
      expect(relativeError(grads.dk, wantGrads.dk)).toBeLessThanOrEqual(TOLERANCE);
      expect(relativeError(grads.dv, wantGrads.dv)).toBeLessThanOrEqual(TOLERANCE);
    });
  }
});
