/**
 * Packed documents through sequence parallelism: a batch of two rows, each
 * packing several documents (a document crossing every shard boundary at
 * SP 2 and 4), trained one step on one device and parallelised at SP 2 and 4
 * (Ulysses and all-gather-KV), against the independent reference: each
 * document run alone through the one-device model, its loss and gradients
 * weighted by its labelled tokens and summed.
 */
import { createLocalGroups } from "@ulysses/collectives";
import { FusedAttention, fusedAttentionStatus } from "@ulysses/native-ops";
import { OrtAttention, SessionCache, createOrtOps } from "@ulysses/kernels";
import { seededRandom } from "@ulysses/kernels/testing";
import { Gpt, type GptConfig } from "@ulysses/model";
import { ParallelDims, parallelize, type Batch, type SequenceParallelKind } from "@ulysses/parallel";
import { Tensor } from "@ulysses/tensors";
import { afterAll, describe, expect, it } from "vitest";
import { IGNORE_INDEX } from "./data/batch.js";
import { lossAndGradients } from "./loss.js";
import { reference, type Kernels } from "./testing-fixtures/compare.js";

const config: GptConfig = { vocab: 32, hidden: 16, heads: 4, kvHeads: 2, layers: 2, mlp: "swiglu", mlpRatio: 2, maxSeq: 64, tiedHead: false, norm: "rmsnorm" };
/** Document lengths of each row: 30 tokens per row; SP 2 cuts at 15, SP 4 at 8, 16 and 23, all inside documents of the first row. */
const ROWS = [
  [6, 11, 4, 9],
  [13, 2, 15],
];
const SEQ = 30;

/** One row's documents: random tokens, labels shifted within each document (its last token predicts nothing). */
function documents() {
  const random = seededRandom(5);
  return ROWS.map((lengths) =>
    lengths.map((length) => {
      const tokens = Int32Array.from({ length }, () => Math.floor(random() * config.vocab));
      const labels = Int32Array.from({ length }, (_, i) => (i + 1 < length ? tokens[i + 1]! : IGNORE_INDEX));
      return { tokens, labels };
    }),
  );
}

/** The packed batch [2, 30] with document ids and restarting positions. */
function packed(): Batch {
  const rows = documents();
  const [tokens, labels, ids, positions] = [0, 1, 2, 3].map(() => new Tensor("int32", [rows.length, SEQ]));
  rows.forEach((docs, row) => {
    let at = row * SEQ;
    docs.forEach((doc, d) => {
      tokens!.data.set(doc.tokens, at);
      labels!.data.set(doc.labels, at);
      for (let i = 0; i < doc.tokens.length; i++) {
        ids!.data[at + i] = 10 * row + d;
        positions!.data[at + i] = i;
      }
      at += doc.tokens.length;
    });
  });
  return { tokens: tokens!, labels: labels!, documents: { ids: ids!, positions: positions! } };
}

const cache = new SessionCache({ intraOpThreads: 1 });
afterAll(() => cache.release());
/** ONNX Runtime ops with each attention kernel (the fused one when its addon is built). */
const onnx: Record<string, Kernels> = {
  ort: { ops: createOrtOps(cache), attention: () => new OrtAttention({ cache }) },
  fused: { ops: createOrtOps(cache), attention: () => new FusedAttention({ threads: 1 }) },
};
const fused = fusedAttentionStatus();

function model(kernels: Kernels): Gpt {
  const gpt = new Gpt(config, { ops: kernels.ops, localAttention: kernels.attention(), seed: 3 });
  return gpt;
}

/** Every document alone on one device: loss and gradients of the mean over all labelled tokens. */
async function separately(kernels: Kernels): Promise<{ loss: number; grads: Float64Array }> {
  const gpt = model(kernels);
  const grads = new Float64Array(gpt.params.size);
  let lossSum = 0;
  let count = 0;
  const perDocument: { loss: number; count: number; grads: Float32Array }[] = [];
  for (const docs of documents()) {
    for (const doc of docs) {
      gpt.params.grads.fill(0);
      const n = doc.tokens.length;
      const result = await lossAndGradients(gpt, kernels.ops, {
        tokens: new Tensor("int32", [1, n], doc.tokens),
        labels: new Tensor("int32", [1, n], doc.labels),
      });
      perDocument.push({ loss: result.loss, count: result.count, grads: gpt.params.grads.slice() });
      lossSum += result.loss * result.count;
      count += result.count;
    }
  }
  // each document's gradient is of its own mean: weight it by its share of the labelled tokens
  for (const d of perDocument) for (let i = 0; i < grads.length; i++) grads[i] += (d.grads[i]! * d.count) / count;
  return { loss: lossSum / count, grads };
}

/** The packed batch on one device (sp null) or parallelised; gradients summed over the ranks. */
async function together(kernels: Kernels, sp: number | null, kind: SequenceParallelKind = "ulysses"): Promise<{ loss: number; grads: Float64Array }> {
  if (sp === null) {
    const gpt = model(kernels);
    const result = await lossAndGradients(gpt, kernels.ops, packed());
    return { loss: result.loss, grads: Float64Array.from(gpt.params.grads) };
  }
  const ranks = await Promise.all(
    createLocalGroups(sp).map(async (world) => {
      const dims = await ParallelDims.create(world, { sp, attention: kind }, { heads: config.heads, kvHeads: config.kvHeads, seqLength: SEQ });
      const parallel = parallelize(model(kernels), dims);
      const result = await lossAndGradients(parallel, kernels.ops, packed());
      return { loss: result.loss, grads: parallel.params.grads };
    }),
  );
  const grads = new Float64Array(ranks[0]!.grads.length);
  for (const r of ranks) for (let i = 0; i < grads.length; i++) grads[i] += r.grads[i]!;
  return { loss: ranks[0]!.loss, grads };
}

function relative(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < b.length; i++) {
    diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
    scale = Math.max(scale, Math.abs(b[i]!));
  }
  return diff / scale;
}

describe("packed documents equal each document alone", () => {
  it("reference kernels: one device, Ulysses and all-gather-KV at SP 2 and 4, within 1e-5", async () => {
    const expected = await separately(reference);
    const runs: [string, number | null, SequenceParallelKind][] = [
      ["one device", null, "ulysses"],
      ["ulysses sp 2", 2, "ulysses"],
      ["ulysses sp 4", 4, "ulysses"],
      ["allgather sp 2", 2, "allgather"],
      ["allgather sp 4", 4, "allgather"],
    ];
    for (const [name, sp, kind] of runs) {
      const got = await together(reference, sp, kind);
      expect(Math.abs(got.loss - expected.loss) / expected.loss, `${name} loss`).toBeLessThanOrEqual(1e-5);
      expect(relative(got.grads, expected.grads), `${name} gradients`).toBeLessThanOrEqual(1e-5);
    }
  });

  for (const [name, kernels] of Object.entries(onnx)) {
    it.skipIf(name === "fused" && !fused.available)(`${name} attention with ONNX Runtime ops: one device and Ulysses at SP 2 and 4, within 1e-5`, async () => {
      const expected = await separately(kernels);
      for (const sp of [null, 2, 4]) {
        const got = await together(kernels, sp);
        expect(Math.abs(got.loss - expected.loss) / expected.loss, `sp ${sp} loss`).toBeLessThanOrEqual(1e-5);
        expect(relative(got.grads, expected.grads), `sp ${sp} gradients`).toBeLessThanOrEqual(1e-5);
      }
    });
  }

  it("packing without document masks would not match (the test can tell)", async () => {
    const expected = await separately(reference);
    const gpt = model(reference);
    const batch = packed();
    const { documents: _unused, ...plain } = batch;
    // positions restart but attention crosses documents: the loss differs
    const result = await lossAndGradients(gpt, reference.ops, plain);
    expect(Math.abs(result.loss - expected.loss) / expected.loss).toBeGreaterThan(1e-4);
  });
});
