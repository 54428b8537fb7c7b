/**
 * The contract's one shape check: sizes of valid inputs, messages that name
 * the call and the offending dtype and shape, and the caller's error factory
 * (how other packages keep their own error class).
 */
import { describe, expect, it } from "vitest";
import { Tensor } from "@ulysses/tensors";
import { KernelError } from "../errors.js";
import { attentionDims, checkBackwardShapes } from "./shapes.js";

class OtherError extends Error {}

const q = new Tensor("float32", [2, 3, 4, 8]);
const k = new Tensor("float32", [2, 5, 2, 8]);

describe("attentionDims and checkBackwardShapes", () => {
  it("returns the sizes of valid inputs", () => {
    expect(attentionDims(q, k, k, { causal: true }, "test")).toEqual({
      batch: 2,
      seqQ: 3,
      seqK: 5,
      heads: 4,
      kvHeads: 2,
      headDim: 8,
      group: 2,
      scale: 1 / Math.sqrt(8),
      causal: true,
      offset: 2,
    });
    const dims = attentionDims(q, k, k, { causal: false, scale: 0.5 }, "test");
    expect(dims.scale).toBe(0.5);
    expect(() => checkBackwardShapes(dims, q, q, new Tensor("float32", [2, 4, 3]), q, "test")).not.toThrow();
  });

  it("names the call and the offending tensor in KernelErrors", () => {
    const cases: [() => unknown, RegExp][] = [
      [
        () => attentionDims(new Tensor("float64", [2, 3, 4, 8]), k, k, { causal: false }, "Test.forward"),
        /^Test\.forward: q must be float32, got float64 \[2, 3, 4, 8\]$/,
      ],
      [
        () => attentionDims(q, new Tensor("float32", [2, 5, 16]), k, { causal: false }, "Test.forward"),
        /^Test\.forward: k must be \[batch, seq, heads, headDim\], got float32 \[2, 5, 16\]$/,
      ],
      [
        () => attentionDims(q, new Tensor("float32", [2, 5, 2, 4]), k, { causal: false }, "Test.forward"),
        /k float32 \[2, 5, 2, 4\] does not match q float32 \[2, 3, 4, 8\] in batch or headDim/,
      ],
      [
        () => attentionDims(q, k, new Tensor("float32", [2, 6, 2, 8]), { causal: false }, "Test.forward"),
        /v float32 \[2, 6, 2, 8\] does not match k float32 \[2, 5, 2, 8\]/,
      ],
      [
        () => attentionDims(q, new Tensor("float32", [2, 5, 3, 8]), new Tensor("float32", [2, 5, 3, 8]), { causal: false }, "Test.forward"),
        /heads \(4\) must be a multiple of kvHeads \(3\)/,
      ],
      [() => attentionDims(q, k, k, { causal: false, scale: NaN }, "Test.forward"), /scale must be finite, got NaN/],
    ];
    for (const [call, message] of cases) {
      expect(call).toThrow(KernelError);
      expect(call).toThrow(message);
    }
    const dims = attentionDims(q, k, k, { causal: true }, "Test.backward");
    expect(() => checkBackwardShapes(dims, q, new Tensor("float32", [2, 3, 4, 7]), new Tensor("float32", [2, 4, 3]), q, "Test.backward")).toThrow(
      /^Test\.backward: dOut must be float32 with q's shape \[2, 3, 4, 8\], got float32 \[2, 3, 4, 7\]$/,
    );
    expect(() => checkBackwardShapes(dims, q, q, new Tensor("float32", [2, 3, 4]), q, "Test.backward")).toThrow(
      /^Test\.backward: logSumExp must be float32 \[2, 4, 3\], got float32 \[2, 3, 4\]$/,
    );
  });

  it("throws the caller's error class when given a factory", () => {
    const other = (message: string) => new OtherError(message);
    const bad = new Tensor("float32", [2, 5, 3, 8]);
    expect(() => attentionDims(q, bad, bad, { causal: false }, "Other.forward", other)).toThrow(OtherError);
    const dims = attentionDims(q, k, k, { causal: false }, "Other.backward", other);
    expect(() => checkBackwardShapes(dims, q, q, q, q, "Other.backward", other)).toThrow(OtherError);
  });
});
