/**
 * The tiled loss (`lossTileRows`) against the untiled one: loss, accuracy and
 * every parameter's gradient within 1e-5 relative, for tied and untied heads,
 * tiles of 1, 5, 7 and >= rows (rows not divisible by the tile), ignored
 * labels and tiles without any label, on one device and parallelised at SP 2
 * and 4 (reference kernels, local backend); the native ops' in-place
 * cross-entropy against the float64 reference; 20 Trainer steps tiled and
 * untiled; evaluation (`backward: false`); and bad tile sizes.
 */
import { createLocalGroups } from "@ulysses/collectives";
import { SessionCache, createOrtOps, OrtAttention } from "@ulysses/kernels";
import { Gpt, headGradientColumns, type GptConfig } from "@ulysses/model";
import { FusedOps, fusedAttentionStatus } from "@ulysses/native-ops";
import { ParallelDims, parallelize, type Batch } from "@ulysses/parallel";
import { Rng, Tensor } from "@ulysses/tensors";
import { afterAll, describe, expect, it } from "vitest";
import { IGNORE_INDEX } from "./data/batch.js";
import { maxRelative, normRelative, reference, type Kernels } from "./testing-fixtures/compare.js";
import { TrainingError } from "./errors.js";
import { lossAndGradients, type LossResult, type TrainModel } from "./loss.js";
import { Trainer } from "./train-step.js";

// vocab at least 16 x hidden: the tied head's dh = dLogits E is a deep product, which FusedOps runs natively (linearForward)
const config: GptConfig = { vocab: 288, hidden: 16, heads: 4, kvHeads: 2, layers: 2, mlp: "gelu", mlpRatio: 2, maxSeq: 64, tiedHead: false };
const SEQ = 22;
const ROWS = 2 * SEQ;

/**
 * Two sequences of random tokens, labels the next token; about a third of the
 * labels ignored, and positions 0..9 of every sequence unlabelled (so tiles of
 * 5 rows at the start, and all of rank 0's rows at SP 4, hold no label).
 */
function batchOf(seed: number): Batch {
  const random = new Rng(seed, 3);
  const tokens = new Tensor("int32", [2, SEQ]);
  const labels = new Tensor("int32", [2, SEQ]);
  for (let i = 0; i < tokens.size; i++) tokens.data[i] = Math.floor(random.uniform() * config.vocab);
  for (let b = 0; b < 2; b++)
    for (let t = 0; t < SEQ; t++) {
      const next = t + 1 < SEQ ? tokens.data[b * SEQ + t + 1]! : IGNORE_INDEX;
      labels.data[b * SEQ + t] = t < 10 || random.uniform() < 0.33 ? IGNORE_INDEX : next;
    }
  return { tokens, labels };
}

const cache = new SessionCache({ intraOpThreads: 1 });
afterAll(() => cache.release());
const ort: Kernels = { ops: createOrtOps(cache), attention: () => new OrtAttention({ cache }) };

function gpt(kernels: Kernels, tiedHead: boolean): Gpt {
  return new Gpt({ ...config, tiedHead }, { ops: kernels.ops, localAttention: kernels.attention(), seed: 11 });
}

interface Outcome {
  result: LossResult;
  /** Per rank: the rank's unreduced gradient. */
  grads: Float32Array[];
}

/** One lossAndGradients on one device (sp null) or on each of `sp` ranks. */
async function once(kernels: Kernels, sp: number | null, tiedHead: boolean, lossTileRows: number | undefined, backward = true): Promise<Outcome> {
  const batch = batchOf(5);
  const step = async (model: TrainModel) => {
    const result = await lossAndGradients(model, kernels.ops, batch, { lossTileRows, backward });
    return { result, grads: model.params.grads.slice() };
  };
  if (sp === null) {
    const { result, grads } = await step(gpt(kernels, tiedHead));
    return { result, grads: [grads] };
  }
  const ranks = await Promise.all(
    createLocalGroups(sp).map(async (world) => {
      const dims = await ParallelDims.create(world, { sp, attention: "ulysses" }, { heads: config.heads, kvHeads: config.kvHeads, seqLength: SEQ });
      return step(parallelize(gpt(kernels, tiedHead), dims));
    }),
  );
  for (const r of ranks) expect(r.result).toEqual(ranks[0]!.result);
  return { result: ranks[0]!.result, grads: ranks.map((r) => r.grads) };
}

function relative(a: number, b: number): number {
  return a === b ? 0 : Math.abs(a - b) / Math.abs(b);
}

/** Loss, accuracy and each parameter's gradient (every rank's) within 1e-5 relative. */
function expectClose(got: Outcome, want: Outcome, tiedHead: boolean, what: string): void {
  expect(got.result.count, `${what} count`).toBe(want.result.count);
  expect(relative(got.result.loss, want.result.loss), `${what} loss`).toBeLessThanOrEqual(1e-5);
  expect(relative(got.result.accuracy, want.result.accuracy), `${what} accuracy`).toBeLessThanOrEqual(1e-5);
  const slots = gpt(reference, tiedHead).params.slots;
  want.grads.forEach((wanted, rank) => {
    for (const [name, { offset, size }] of slots) {
      // a rank without labels has a zero head gradient: then the tiled one must be zero too
      const b = wanted.subarray(offset, offset + size);
      expect(normRelative(got.grads[rank]!.subarray(offset, offset + size), b), `${what} rank ${rank} ${name}`).toBeLessThanOrEqual(1e-5);
    }
  });
}

describe("tiled logits and loss (lossTileRows) equal the untiled path", () => {
  const tiles = [1, 5, 7, ROWS, 100];

  for (const tiedHead of [false, true]) {
    it(`one device, ${tiedHead ? "tied" : "untied"} head: tiles ${tiles.join(", ")} (of ${ROWS} rows)`, async () => {
      const want = await once(reference, null, tiedHead, undefined);
      expect(want.result.count).toBeGreaterThan(0);
      expect(want.result.count).toBeLessThan(ROWS);
      for (const { offset, size } of gpt(reference, tiedHead).params.slots.values())
        expect(want.grads[0]!.subarray(offset, offset + size).some((x) => x !== 0)).toBe(true);
      expect(await once(reference, null, tiedHead, 0)).toEqual(want);
      for (const tile of tiles) expectClose(await once(reference, null, tiedHead, tile), want, tiedHead, `tile ${tile}`);
    });

    it(`ParallelGpt at SP 2 and SP 4 (uneven shards), ${tiedHead ? "tied" : "untied"} head: tiles 1, 5, 7, ${ROWS}`, async () => {
      for (const sp of [2, 4]) {
        const want = await once(reference, sp, tiedHead, undefined);
        for (const tile of [1, 5, 7, ROWS]) expectClose(await once(reference, sp, tiedHead, tile), want, tiedHead, `sp ${sp} tile ${tile}`);
      }
    });
  }

  it("ONNX Runtime ops (tile views into the hidden state): one device, tiles 5 and 7", async () => {
    const want = await once(ort, null, false, undefined);
    for (const tile of [5, 7]) expectClose(await once(ort, null, false, tile), want, false, `ort tile ${tile}`);
  });

  const addon = fusedAttentionStatus();
  it.skipIf(!addon.available)(
    `native ops (the cross-entropy written over each tile's logits, a tied head without a transposed copy) against the float64 reference${addon.available ? "" : ` (skipped: ${addon.reason})`}: one device and SP 2, both heads, tiles 5 and 7`,
    async () => {
      const native: Kernels = { ops: new FusedOps(cache), attention: () => new OrtAttention({ cache }) };
      expect(native.ops.crossEntropyInPlace).toBeTypeOf("function");
      for (const tiedHead of [false, true])
        for (const sp of [null, 2]) {
          const want = await once(reference, sp, tiedHead, undefined);
          for (const tile of [5, 7])
            expectClose(await once(native, sp, tiedHead, tile), want, tiedHead, `native sp ${sp} ${tiedHead ? "tied" : "untied"} tile ${tile}`);
        }
    },
  );

  it("evaluation (backward: false) with tiles: the same loss and accuracy, no gradients, at one device and SP 2", async () => {
    for (const sp of [null, 2]) {
      const want = await once(reference, sp, true, undefined, false);
      for (const tile of [5, ROWS]) {
        const got = await once(reference, sp, true, tile, false);
        expect(got.result.count).toBe(want.result.count);
        expect(relative(got.result.loss, want.result.loss), `sp ${sp} tile ${tile} loss`).toBeLessThanOrEqual(1e-5);
        expect(relative(got.result.accuracy, want.result.accuracy)).toBeLessThanOrEqual(1e-5);
        for (const g of got.grads) expect(g.every((x) => x === 0)).toBe(true);
      }
      // and a training step after evaluating still works (the blocks' attention buffers were given back)
      expect((await once(reference, sp, true, 5)).result.count).toBe(want.result.count);
    }
  });

  it("a batch without any label: loss 0 and zero gradients, tiled as untiled", async () => {
    const model = gpt(reference, false);
    const batch = batchOf(5);
    batch.labels.data.fill(IGNORE_INDEX);
    for (const lossTileRows of [undefined, 5]) {
      model.params.grads.fill(0);
      expect(await lossAndGradients(model, reference.ops, batch, { lossTileRows })).toEqual({ loss: 0, count: 0, accuracy: 0 });
      expect(model.params.grads.every((x) => x === 0)).toBe(true);
    }
  });

  it("a bad lossTileRows throws a TrainingError naming the value", async () => {
    const model = gpt(reference, false);
    for (const bad of [0.5, -2, Number.NaN, Number.POSITIVE_INFINITY]) {
      const call = lossAndGradients(model, reference.ops, batchOf(5), { lossTileRows: bad });
      await expect(call).rejects.toThrow(TrainingError);
      await expect(call).rejects.toThrow(String(bad));
      expect(() => new Trainer(model, { ops: reference.ops, gradClip: 1, adamw: {}, zero: 0 as const, lossTileRows: bad })).toThrow(
        new RegExp(`lossTileRows .*got ${String(bad).replace(".", "\\.")}$`),
      );
    }
  });
});

describe("a vocabulary whose head weight gradient is made in column blocks", () => {
  // hidden 64: blocks of 4 MiB / (4 x 64) = 16384 columns, so vocab 20000 is two blocks, 16384 and 3616 columns
  const big: GptConfig = { ...config, vocab: 20000, hidden: 64, layers: 1 };

  /** `headGradientColumns` undefined: the default blocks; the vocabulary: one block. */
  async function outcome(
    kernels: Kernels,
    sp: number | null,
    lossTileRows: number | undefined,
    headGradientColumns?: number,
  ): Promise<{ result: LossResult; grads: Float32Array[] }> {
    const random = new Rng(9, 1);
    const tokens = new Tensor(
      "int32",
      [2, SEQ],
      Int32Array.from({ length: ROWS }, () => Math.floor(random.uniform() * big.vocab)),
    );
    const labels = new Tensor(
      "int32",
      [2, SEQ],
      Int32Array.from({ length: ROWS }, (_, i) => (i % 3 === 0 ? IGNORE_INDEX : Math.floor(random.uniform() * big.vocab))),
    );
    const model = () => new Gpt(big, { ops: kernels.ops, localAttention: kernels.attention(), seed: 3, headGradientColumns });
    const step = async (m: TrainModel) => ({
      result: await lossAndGradients(m, kernels.ops, { tokens, labels }, { lossTileRows }),
      grads: m.params.grads.slice(),
    });
    if (sp === null) {
      const r = await step(model());
      return { result: r.result, grads: [r.grads] };
    }
    const ranks = await Promise.all(
      createLocalGroups(sp).map(async (world) =>
        step(parallelize(model(), await ParallelDims.create(world, { sp, attention: "ulysses" }, { heads: big.heads, kvHeads: big.kvHeads, seqLength: SEQ }))),
      ),
    );
    return { result: ranks[0]!.result, grads: ranks.map((r) => r.grads) };
  }

  it("ONNX Runtime ops in two blocks equal the float64 reference ops in one, untiled and in tiles of 7, one device and SP 2", async () => {
    expect(headGradientColumns(big.hidden, big.vocab, 7)).toBe(16384);
    expect(headGradientColumns(big.hidden, big.vocab, ROWS)).toBe(16384);
    const slots = new Gpt(big, { ops: reference.ops, localAttention: reference.attention(), seed: 3 }).params.slots;
    for (const sp of [null, 2])
      for (const tile of [undefined, 7]) {
        const [got, want] = [await outcome(ort, sp, tile), await outcome(reference, sp, tile, big.vocab)];
        const what = `sp ${sp ?? 1} tile ${tile ?? "off"}`;
        expect(relative(got.result.loss, want.result.loss), `${what} loss`).toBeLessThanOrEqual(1e-5);
        want.grads.forEach((wanted, rank) => {
          for (const [name, { offset, size }] of slots)
            expect(
              normRelative(got.grads[rank]!.subarray(offset, offset + size), wanted.subarray(offset, offset + size)),
              `${what} rank ${rank} ${name}`,
            ).toBeLessThanOrEqual(1e-5);
        });
        // both blocks of the head's gradient were written: columns on either side of 16384 are non-zero
        const head = slots.get("head.w")!;
        const w = got.grads.at(-1)!.subarray(head.offset, head.offset + head.size);
        const column = (c: number) => Array.from({ length: big.hidden }, (_, i) => w[i * big.vocab + c]!);
        expect(column(16383).some((x) => x !== 0) && column(16384).some((x) => x !== 0) && column(19999).some((x) => x !== 0), what).toBe(true);
      }
  }, 60_000);
});

describe("20 Trainer steps with a tiled loss train like untiled ones", () => {
  /** Losses of every step and rank 0's final weights (two batches in turn, so the loss can fall). */
  async function train(sp: number | null, tiedHead: boolean, lossTileRows: number | undefined) {
    const loop = async (trainer: Trainer) => {
      const losses: number[] = [];
      for (let step = 0; step < 20; step++) losses.push((await trainer.trainStep(batchOf(100 + (step % 2)), 1e-2)).loss);
      return { losses, weights: trainer.model.params.values };
    };
    const options = { ops: reference.ops, gradClip: 1, adamw: { weightDecay: 0.1 }, zero: 0 as const, lossTileRows };
    if (sp === null) return loop(new Trainer(gpt(reference, tiedHead), options));
    const ranks = await Promise.all(
      createLocalGroups(sp).map(async (world) => {
        const dims = await ParallelDims.create(world, { sp, attention: "ulysses" }, { heads: config.heads, kvHeads: config.kvHeads, seqLength: SEQ });
        return loop(new Trainer(parallelize(gpt(reference, tiedHead), dims), options));
      }),
    );
    return ranks[0]!;
  }

  for (const [sp, tiedHead, tile] of [
    [null, false, 5],
    [null, true, 7],
    [2, true, 5],
  ] as const) {
    it(`${sp === null ? "one device" : `SP ${sp}`}, ${tiedHead ? "tied" : "untied"} head, tiles of ${tile}: losses and final weights within 1e-5`, async () => {
      const want = await train(sp, tiedHead, undefined);
      const got = await train(sp, tiedHead, tile);
      expect(want.losses[19]!).toBeLessThan(want.losses[0]!);
      want.losses.forEach((loss, step) => expect(relative(got.losses[step]!, loss), `loss ${step}`).toBeLessThanOrEqual(1e-5));
      expect(maxRelative(got.weights, want.weights), "weights").toBeLessThanOrEqual(1e-5);
    });
  }
});

describe("20 Trainer steps of every memory mode train like the plain run (SP 1, 2, 4)", () => {
  interface Mode {
    checkpoint: boolean;
    mlpTileRows: number;
    lossTileRows: number;
    attentionHeadGroups?: number;
  }
  async function train(sp: number, mode: Mode) {
    const make = () =>
      new Gpt(config, {
        ops: reference.ops,
        localAttention: reference.attention(),
        seed: 11,
        activationCheckpointing: mode.checkpoint,
        mlpTileRows: mode.mlpTileRows,
        attentionHeadGroups: mode.attentionHeadGroups,
      });
    const options = { ops: reference.ops, gradClip: 1, adamw: { weightDecay: 0.1 }, zero: 0 as const, lossTileRows: mode.lossTileRows };
    const loop = async (trainer: Trainer) => {
      const losses: number[] = [];
      for (let step = 0; step < 20; step++) losses.push((await trainer.trainStep(batchOf(200 + (step % 2)), 1e-2)).loss);
      return { losses, weights: trainer.model.params.values };
    };
    const ranks = await Promise.all(
      createLocalGroups(sp).map(async (world) => {
        const dims = await ParallelDims.create(world, { sp, attention: "ulysses" }, { heads: config.heads, kvHeads: config.kvHeads, seqLength: SEQ });
        return loop(new Trainer(parallelize(make(), dims), options));
      }),
    );
    return ranks[0]!;
  }
  const plain: Mode = { checkpoint: false, mlpTileRows: 0, lossTileRows: 0 };
  const modes: [string, Mode][] = [
    ["checkpointing", { ...plain, checkpoint: true }],
    ["tiled MLP (tiles of 3)", { ...plain, mlpTileRows: 3 }],
    ["tiled loss (tiles of 4)", { ...plain, lossTileRows: 4 }],
    ["checkpointing + tiled MLP + tiled loss (tiles of 5 and 3)", { checkpoint: true, mlpTileRows: 5, lossTileRows: 3 }],
  ];
  // 4 heads in 2 groups leave 2 heads a group: Ulysses over 4 ranks needs 4, so head groups run at SP 1 and 2
  const grouped: [string, Mode][] = [
    ["attention in 2 head groups", { ...plain, attentionHeadGroups: 2 }],
    [
      "checkpointing + 2 head groups + tiled MLP + tiled loss (tiles of 5 and 3)",
      { checkpoint: true, mlpTileRows: 5, lossTileRows: 3, attentionHeadGroups: 2 },
    ],
  ];
  for (const sp of [1, 2, 4])
    it(`SP ${sp}: ${[...modes, ...(sp <= 2 ? grouped : [])].map(([name]) => name).join("; ")}: losses and final weights within 1e-5 of the plain run`, async () => {
      const want = await train(sp, plain);
      expect(want.losses[19]!).toBeLessThan(want.losses[0]!);
      for (const [name, mode] of [...modes, ...(sp <= 2 ? grouped : [])]) {
        const got = await train(sp, mode);
        want.losses.forEach((loss, step) => expect(relative(got.losses[step]!, loss), `${name}: loss ${step}`).toBeLessThanOrEqual(1e-5));
        expect(maxRelative(got.weights, want.weights), `${name}: weights`).toBeLessThanOrEqual(1e-5);
      }
    });
});
