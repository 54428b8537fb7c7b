/**
 * The derived backward graphs carry no wasted forward work: statistics come
 * from the saved inputs (no normalization node is recomputed), rope's backward
 * never reads x and costs what its forward costs, and linear's backward is two
 * Gemms and one row sum in one graph.
 */
import { describe, expect, it } from "vitest";
import { decodeModel } from "../graph/decode.js";
import * as graphs from "./ort-graphs.js";

function opTypes(bytes: Uint8Array): string[] {
  return decodeModel(bytes)
    .graph!.node!.map((n) => n.opType!)
    .filter((op) => op !== "Identity");
}

function inputs(bytes: Uint8Array): string[] {
  return decodeModel(bytes).graph!.input!.map((i) => i.name!);
}

const count = (ops: string[], op: string) => ops.filter((o) => o === op).length;

describe("derived backward graphs", () => {
  it("layerNorm and rmsNorm read the saved statistics instead of recomputing them", () => {
    const ln = graphs.layerNormBackwardGraph(4, 6);
    expect(opTypes(ln)).not.toContain("LayerNormalization");
    expect(inputs(ln).sort()).toEqual(["dy", "gamma", "mean", "rstd", "x"]);
    const rms = graphs.rmsNormBackwardGraph(4, 6);
    expect(opTypes(rms)).not.toContain("SimplifiedLayerNormalization");
    expect(inputs(rms).sort()).toEqual(["dy", "gamma", "rstd", "x"]);
  });

  it("rope backward needs no x and has the same ops as forward", () => {
    const forward = opTypes(graphs.ropeForwardGraph([1, 3, 2, 4]));
    const backward = graphs.ropeBackwardGraph([1, 3, 2, 4]);
    expect(inputs(backward).sort()).toEqual(["cos", "dy", "sin"]);
    expect(opTypes(backward).sort()).toEqual([...forward].sort());
  });

  it("rope with per-token tables takes cos/sin [batch, seq, 1, headDim] and has the same ops", () => {
    const shapes = (bytes: Uint8Array) =>
      Object.fromEntries(decodeModel(bytes).graph!.input!.map((i) => [i.name!, i.type!.tensorType!.shape!.dim!.map((d) => Number(d.dimValue))]));
    for (const build of [graphs.ropeForwardGraph, graphs.ropeBackwardGraph]) {
      expect(shapes(build([2, 3, 4, 6], true)).cos).toEqual([2, 3, 1, 6]);
      expect(shapes(build([2, 3, 4, 6])).sin).toEqual([3, 1, 6]);
      expect(opTypes(build([2, 3, 4, 6], true))).toEqual(opTypes(build([2, 3, 4, 6])));
    }
  });

  it("linear backward is two Gemms and one row sum", () => {
    const ops = opTypes(graphs.linearBackwardGraph(5, 3, 2, true));
    expect(count(ops, "Gemm")).toBe(2);
    expect(count(ops, "ReduceSum")).toBe(1);
    expect(ops.length).toBeLessThanOrEqual(4);
    expect(opTypes(graphs.linearBackwardGraph(5, 3, 2, false))).toEqual(["Gemm", "Gemm"]);
  });
});
