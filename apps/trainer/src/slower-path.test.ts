/**
 * The run header names every elementwise op of the model that has no native
 * kernel while others do (the issue: an RMSNorm model silently ran the
 * slower path). NATIVE_OPS is checked against what FusedOps really
 * overrides, so the list cannot drift from the code.
 */
import { FusedOps, NATIVE_OPS } from "@ulysses/native-ops";
import { OrtOps } from "@ulysses/kernels";
import type { GptConfig } from "@ulysses/model";
import { describe, expect, it } from "vitest";
import { slowerPathNote } from "./kernels.js";

const base: GptConfig = { vocab: 64, hidden: 32, heads: 4, kvHeads: 4, layers: 1, mlp: "gelu", mlpRatio: 2, maxSeq: 16, tiedHead: true };

describe("the header's slower-path note", () => {
  it("NATIVE_OPS are exactly the ops FusedOps defines itself (its other ops are OrtOps' graphs)", () => {
    const own = Object.getOwnPropertyNames(FusedOps.prototype).filter((name) => name !== "constructor");
    const ops = own.filter((name) => name in OrtOps.prototype || ["addInto", "adamwUpdate", "linearWeightGradientInto", "crossEntropyInPlace"].includes(name));
    expect(new Set(ops)).toEqual(new Set(NATIVE_OPS));
  });

  it("names RMSNorm and SwiGLU when native kernels run the rest, and nothing otherwise", () => {
    expect(slowerPathNote(base, true)).toBe("");
    expect(slowerPathNote({ ...base, mlp: "swiglu" }, true)).toBe("; slower path (ONNX Runtime graphs, no native kernel): swigluForward, swigluBackward");
    expect(slowerPathNote({ ...base, norm: "rmsnorm" }, true)).toBe("; slower path (ONNX Runtime graphs, no native kernel): rmsNormForward, rmsNormBackward");
    expect(slowerPathNote({ ...base, norm: "rmsnorm", mlp: "swiglu" }, false)).toBe("");
  });
});
