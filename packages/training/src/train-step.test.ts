import { createLocalGroups } from "@ulysses/collectives";
import { seededRandom } from "@ulysses/kernels";
import { describe, expect, it } from "vitest";
import { allReduceInChunks } from "./train-step.js";

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
});
