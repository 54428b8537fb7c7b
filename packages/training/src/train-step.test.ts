import { createLocalGroups } from "@ulysses/collectives";
import { seededRandom } from "@ulysses/kernels/testing";
import { describe, expect, it } from "vitest";
import { allGatherInChunks, allReduceInChunks, reduceScatterInChunks } from "./zero-collectives.js";

describe("allReduceInChunks", () => {
  it("sums in place over 3 ranks, in calls of at most the chunk, equal to the float64 sum of the ranks' vectors", async () => {
    const random = seededRandom(11);
    const length = 23;
    const inputs = Array.from({ length: 3 }, () => Float32Array.from({ length }, () => random() * 2 - 1));
    const expected = Array.from({ length }, (_, i) => inputs.reduce((sum, v) => sum + v[i]!, 0));
    const groups = createLocalGroups(3);
    const sizes: number[][] = groups.map(() => []);
    const vectors = inputs.map((v) => v.slice());
    await Promise.all(
      groups.map((group, r) => {
        const allReduce = group.allReduce.bind(group);
        group.allReduce = (tensor, options) => {
          sizes[r]!.push((tensor as { size: number }).size);
          return allReduce(tensor, options);
        };
        // 5 floats a call: 23 = 5 + 5 + 5 + 5 + 3
        return allReduceInChunks(group, vectors[r]!, 20);
      }),
    );
    for (const s of sizes) expect(s).toEqual([5, 5, 5, 5, 3]);
    for (const v of vectors) for (let i = 0; i < length; i++) expect(v[i]).toBeCloseTo(expected[i]!, 6);
  });

  it("ZeRO-1's reduce-scatter and all-gather in windows: each rank's summed slice equals the float64 sum, and every rank gets every slice back", async () => {
    const random = seededRandom(12);
    const sliceSizes = [7, 5, 3];
    const total = 15;
    const inputs = Array.from({ length: 3 }, () => Float32Array.from({ length: total }, () => random() * 2 - 1));
    const sums = Array.from({ length: total }, (_, i) => inputs.reduce((sum, v) => sum + v[i]!, 0));
    const groups = createLocalGroups(3);
    const moved: number[][] = groups.map(() => []);
    for (const [r, group] of groups.entries()) {
      const reduceScatter = group.reduceScatter.bind(group);
      const allGather = group.allGather.bind(group);
      group.reduceScatter = (tensor, options) => {
        moved[r]!.push((tensor as { size: number }).size);
        return reduceScatter(tensor, options);
      };
      group.allGather = (tensor, options) => {
        moved[r]!.push(options!.sizes!.reduce((a, b) => a + b, 0));
        return allGather(tensor, options);
      };
    }
    // 24 bytes: 6 floats a window, 2 of each rank's slice
    const slices = await Promise.all(groups.map((group, r) => reduceScatterInChunks(group, inputs[r]!, sliceSizes, 24)));
    const offsets = [0, 7, 12];
    slices.forEach((slice, r) => {
      expect(slice.length).toBe(sliceSizes[r]);
      for (let i = 0; i < slice.length; i++) expect(slice[i]).toBeCloseTo(sums[offsets[r]! + i]!, 6);
    });
    // windows of 2 + 2 + 2, 2 + 2 + 1, 2 + 1 + 0, 1 + 0 + 0 elements
    for (const m of moved) expect(m).toEqual([6, 5, 3, 1]);
    const flats = groups.map(() => new Float32Array(total).fill(Number.NaN));
    await Promise.all(groups.map((group, r) => allGatherInChunks(group, slices[r]!, flats[r]!, sliceSizes, 24)));
    const whole = Float32Array.from(slices.flatMap((s) => [...s]));
    for (const f of flats) expect([...f]).toEqual([...whole]);
    for (const m of moved) expect(m).toEqual([6, 5, 3, 1, 6, 5, 3, 1]);
  });
});
