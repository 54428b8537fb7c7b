import { describe, expect, it } from "vitest";
import { Tensor, permute, concat, chunk } from "@ulysses/tensors";
import { coalesceAxes } from "./layout.js";

describe("layout smoke", () => {
  it("permute [2,3] -> [3,2]", () => {
    const t = Tensor.from("float32", [2, 3], [0, 1, 2, 3, 4, 5]);
    expect(Array.from(permute(t, [1, 0]).data)).toEqual([0, 3, 1, 4, 2, 5]);
    expect(Array.from(concat(chunk(t, 3, 1), 1).data)).toEqual([0, 1, 2, 3, 4, 5]);
  });

  it("permute of a rank-0 tensor and of size-1 axes", () => {
    expect(Array.from(permute(Tensor.from("float32", [], [7]), []).data)).toEqual([7]);
    const t = Tensor.from("int32", [1, 3, 1], [1, 2, 3]);
    const p = permute(t, [2, 1, 0]);
    expect(p.shape).toEqual([1, 3, 1]);
    expect(Array.from(p.data)).toEqual([1, 2, 3]);
  });
});

describe("coalesceAxes", () => {
  it.each([
    // [b=1, N, H, D] -> [H, b, N, D]: b drops out, D stays the contiguous row
    [
      [1, 8, 4, 2],
      [2, 0, 1, 3],
      [8, 4, 2],
      [1, 0, 2],
    ],
    // [P, n, h, D] -> [n, P, h, D]: h and D move together
    [
      [4, 3, 2, 5],
      [1, 0, 2, 3],
      [4, 3, 10],
      [1, 0, 2],
    ],
    // identity: one flat axis
    [[2, 3, 4], [0, 1, 2], [24], [0]],
    // only size-1 axes: nothing left
    [[1, 1], [1, 0], [], []],
    // a size-1 axis between two axes that swap
    [
      [2, 1, 3],
      [2, 1, 0],
      [2, 3],
      [1, 0],
    ],
    // two pairs that swap as blocks
    [
      [2, 3, 4, 5],
      [2, 3, 0, 1],
      [6, 20],
      [1, 0],
    ],
  ])("%j permuted %j -> %j permuted %j", (shape, axes, mergedShape, mergedAxes) => {
    expect(coalesceAxes(shape, axes)).toEqual({ shape: mergedShape, axes: mergedAxes });
  });
});
