/**
 * ZeRO 1 to 3, with and without one shared copy of the weights, against
 * ZeRO-0 on the local backend (the loop of testing-fixtures/sp-train.ts):
 * losses and weights over 20 steps, the state each rank holds at each stage
 * (rankStateFloats), what ZeRO-3 gathers and when (the next layer's weights
 * prefetched while a layer runs), and bf16 slice gradients.
 */
import { StatsReferenceAttention } from "@ulysses/kernels";
import { evenSplitSizes } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { maxRelative, normRelative } from "./testing-fixtures/compare.js";
import { train, type Options } from "./testing-fixtures/sp-train.js";
import { rankStateFloats } from "./memory-terms.js";
import type { ZeroStage } from "./train-step.js";

describe("ZeRO 1 to 3, with and without one shared copy of the weights, train as ZeRO-0 (20 steps)", () => {
  const stats = () => new StatsReferenceAttention();
  const cases: { name: string; sp: number; options: Options; edges: number }[] = [
    // outside the blocks: embedding 32 x 16, head 16 x 32 (untied), final LayerNorm 2 x 16
    { name: "Ulysses SP 2", sp: 2, options: {}, edges: 512 + 512 + 32 },
    { name: "Ulysses SP 4 (uneven shards), tied head", sp: 4, options: { tiedHead: true }, edges: 512 + 32 },
    { name: "ring P = 4 (zigzag)", sp: 4, options: { attention: "ring", local: stats }, edges: 1056 },
    {
      name: "hybrid 2x2, checkpointing, tied head",
      sp: 4,
      options: { attention: "hybrid", local: stats, checkpointing: true, tiedHead: true, dims: { ulyssesDegree: 2, ringDegree: 2 } },
      edges: 544,
    },
  ];
  const stages: { zero: ZeroStage; shared?: boolean }[] = [{ zero: 1 }, { zero: 2 }, { zero: 3 }, { zero: 1, shared: true }, { zero: 2, shared: true }];
  // what ZeRO-3 gathers, of the test model (2 layers, hidden 16, vocab 32): the final LayerNorm's 2 x 16, the head's (or tied, the embedding's) 32 x 16
  const finalNorm = 32;
  const head = 512;
  for (const c of cases) {
    it(`${c.name}: losses and weights within 1e-5 at ${stages.map((s) => `ZeRO-${s.zero}${s.shared ? " shared" : ""}`).join(", ")}`, async () => {
      const want = await train(c.sp, c.options);
      expect(want.losses[19]!).toBeLessThan(want.losses[0]!);
      const parameters = want.weights.length;
      for (const stage of stages) {
        const what = `ZeRO-${stage.zero}${stage.shared ? " shared" : ""}`;
        const got = await train(c.sp, { ...c.options, ...stage });
        want.losses.forEach((loss, step) => expect(Math.abs(got.losses[step]! - loss) / loss, `${what} loss ${step}`).toBeLessThanOrEqual(1e-5));
        expect(maxRelative(got.weights, want.weights), `${what} weights`).toBeLessThanOrEqual(1e-5);
        // what each rank allocated is the stage's formula
        const layer = (parameters - c.edges) / 2;
        const gathered = { layer, layers: 2, finalNorm, head };
        got.ranksHeld!.forEach((held, rank) =>
          expect(held, `${what} rank ${rank}`).toEqual(
            rankStateFloats({ parameters, edgeParameters: c.edges, groupSize: c.sp, rank, zero: stage.zero, gathered }),
          ),
        );
        // ZeRO-3 gathers per step the final norm, the table for the lookup, the head, and the two layers once (both still staged for the backward)
        expect(got.gatheredPerStep).toEqual(Array(20).fill(stage.zero === 3 ? finalNorm + 2 * head + 2 * layer : 0));
      }
      // ZeRO-0 holds everything on every rank
      want.ranksHeld!.forEach((held) =>
        expect(held).toEqual({
          weights: parameters,
          gatheredWeights: 0,
          lossPhaseWeights: 0,
          gradients: parameters,
          lossPhaseGradients: 0,
          moments: 2 * parameters,
        }),
      );
    });
  }

  it("ZeRO-3 with 5 layers (Ulysses SP 2, checkpointing, tied head): ZeRO-0's losses and weights within 1e-5; layers 0 .. 2 gathered again for the backward", async () => {
    const options: Options = { model: { layers: 5 }, checkpointing: true, tiedHead: true };
    const want = await train(2, options);
    const got = await train(2, { ...options, zero: 3 });
    want.losses.forEach((loss, step) => expect(Math.abs(got.losses[step]! - loss) / loss, `loss ${step}`).toBeLessThanOrEqual(1e-5));
    expect(maxRelative(got.weights, want.weights)).toBeLessThanOrEqual(1e-5);
    const layer = (want.weights.length - head - finalNorm) / 5;
    expect(got.gatheredPerStep).toEqual(Array(20).fill(finalNorm + 2 * head + (5 + 3) * layer));
    // between layers a rank holds its half of the weights, two layers and the final norm
    got.ranksHeld!.forEach((held, rank) => {
      expect(held.weights).toBe(evenSplitSizes(want.weights.length, 2)[rank]);
      expect(held.gatheredWeights).toBe(2 * layer + finalNorm);
    });
    // prefetched: the next layer's gather (l + 1 in the forward, l - 1 in the backward) starts before layer l runs, and ends after it began
    const at = (event: string) => {
      const i = got.events.indexOf(event);
      expect(i, event).toBeGreaterThanOrEqual(0);
      return i;
    };
    for (let l = 0; l < 4; l++) {
      expect(at(`gather ${l + 1} start`), `forward ${l}`).toBeLessThan(at(`forward ${l} start`));
      expect(at(`gather ${l + 1} end`), `forward ${l}`).toBeGreaterThan(at(`forward ${l} start`));
    }
    // the backward gathers layers 2, 1, 0 again (3 and 4 are still staged)
    const backwardGathers = got.events.filter((e, i) => e.endsWith("start") && e.startsWith("gather") && i > at("backward 4 start"));
    expect(backwardGathers).toEqual(["gather 2 start", "gather 1 start", "gather 0 start"]);
    for (let l = 3; l >= 1; l--) {
      expect(got.events.lastIndexOf(`gather ${l - 1} start`), `backward ${l}`).toBeLessThan(at(`backward ${l} start`));
      expect(got.events.lastIndexOf(`gather ${l - 1} end`), `backward ${l}`).toBeGreaterThan(at(`backward ${l} start`));
    }
  });

  // bf16 slices round each element's summed gradient to 8 significant bits: not ZeRO-0's bits, but its curve within the tolerance
  it("ZeRO-2 with the slice gradients stored in bf16 (Ulysses SP 4 and hybrid 2x2, shared weights, tied head): ZeRO-0's losses within 1e-3, weights within 3e-3, and not its bits", async () => {
    for (const c of [cases[1]!, cases[3]!]) {
      const want = await train(c.sp, c.options);
      const fp32 = await train(c.sp, { ...c.options, zero: 2, shared: true });
      const got = await train(c.sp, { ...c.options, zero: 2, shared: true, gradientDtype: "bfloat16" });
      want.losses.forEach((loss, step) => expect(Math.abs(got.losses[step]! - loss) / loss, `${c.name} bf16 loss ${step}`).toBeLessThanOrEqual(1e-3));
      expect(normRelative(got.weights, want.weights), `${c.name} bf16 weights`).toBeLessThanOrEqual(3e-3);
      // the rounding is there: farther from ZeRO-0 than the fp32 slices are
      expect(normRelative(got.weights, want.weights)).toBeGreaterThan(10 * normRelative(fp32.weights, want.weights) + 1e-7);
    }
  });

  it("ZeRO-3 with the weights gathered in bf16 (Ulysses SP 4, tied head; hybrid 2x2): ZeRO-0's losses within 1e-3, and each gather gives the fp32 master slices rounded to nearest even", async () => {
    for (const c of [cases[1]!, cases[3]!]) {
      const want = await train(c.sp, c.options);
      const got = await train(c.sp, { ...c.options, zero: 3, gatherDtype: "bfloat16" });
      want.losses.forEach((loss, step) => expect(Math.abs(got.losses[step]! - loss) / loss, `${c.name} loss ${step}`).toBeLessThanOrEqual(1e-3));
      // the master: the ranks' fp32 slices back to back; what a gather gives after the last update: each of them rounded
      const master = new Float32Array(got.weights.length);
      let at = 0;
      for (const slice of got.slices!) {
        master.set(slice, at);
        at += slice.length;
      }
      expect(at).toBe(master.length);
      // the forward and backward read rounded weights: AdamW turns gradients that differ by that rounding into steps of full size
      // where the gradient is noise, so the master drifts further from ZeRO-0's than bf16 gradient slices make it (1.0% here)
      expect(normRelative(master, want.weights), `${c.name} master weights`).toBeLessThanOrEqual(2e-2);
      const rounded = Float32Array.from(master, nearestBfloat16);
      expect([...got.weights]).toEqual([...rounded]);
      // and the master is not rounded itself
      expect(master.some((v, i) => v !== rounded[i])).toBe(true);
    }
  });

  it("weightGatherDtype bfloat16 needs ZeRO-3", async () => {
    await expect(train(2, { steps: 1, zero: 2, gatherDtype: "bfloat16" })).rejects.toThrow(
      /weights gathered in bfloat16 are ZeRO-3's gathers: they need ZeRO stage 3, got zero 2/,
    );
  });
});

/** The bf16 value nearest `x` (a float32), ties to the even mantissa: the two candidates by truncating its bits, compared in float64. */
function nearestBfloat16(x: number): number {
  const bits = new Uint32Array(new Float32Array([x]).buffer)[0]!;
  const down = new Float32Array(new Uint32Array([(bits & 0xffff0000) >>> 0]).buffer)[0]!;
  const up = new Float32Array(new Uint32Array([((bits & 0xffff0000) + 0x10000) >>> 0]).buffer)[0]!;
  const below = Math.abs(x - down);
  const above = Math.abs(up - x);
  if (below !== above) return below < above ? down : up;
  return ((bits >>> 16) & 1) === 0 ? down : up;
}
