import { describe, expect, it } from "vitest";
import { Tensor, permute, concat, chunk } from "@ulysses/tensors";

describe("layout smoke", () => {
  it("permute [2,3] -> [3,2]", () => {
    const t = Tensor.from("float32", [2, 3], [0, 1, 2, 3, 4, 5]);
    expect(Array.from(permute(t, [1, 0]).data)).toEqual([0, 3, 1, 4, 2, 5]);
    expect(Array.from(concat(chunk(t, 3, 1), 1).data)).toEqual([0, 1, 2, 3, 4, 5]);
  });
});
