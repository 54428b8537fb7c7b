/** The encoded graphs: one custom-op node with its attributes and symbolic dims. */
import { decodeModel, type DecodedValueInfo } from "@ulysses/kernels";
import { describe, expect, it } from "vitest";
import { CUSTOM_OP_DOMAIN, attentionModel, type GraphKind } from "./model.js";

function decoded(kind: GraphKind, causal: boolean, scale: number, documents = false) {
  const model = decodeModel(attentionModel(kind, causal, scale, documents));
  const graph = model.graph;
  const node = graph.node[0]!;
  const attributes = Object.fromEntries(node.attribute.map((a) => [a.name, a.name === "scale" ? a.f : a.i]));
  const dims = (v: DecodedValueInfo) => v.type!.tensorType!.shape!.dim.map((d) => d.dimParam);
  return { model, graph, node, attributes, dims };
}

describe("attentionModel", () => {
  it("encodes the forward op with causal and scale attributes", () => {
    const { model, graph, node, attributes, dims } = decoded("forward", true, 0.125);
    expect(model.opsetImport.map((o) => [o.domain, Number(o.version)])).toContainEqual([CUSTOM_OP_DOMAIN, 1]);
    expect(node.opType).toBe("FlashAttention");
    expect(node.domain).toBe("ulysses");
    expect(node.input).toEqual(["q", "k", "v"]);
    expect(node.output).toEqual(["out", "lse"]);
    expect(attributes).toEqual({ causal: 1, scale: 0.125 });
    expect(dims(graph.input[1]!)).toEqual(["batch", "seq_k", "kv_heads", "head_dim"]);
    expect(dims(graph.output[1]!)).toEqual(["batch", "heads", "seq_q"]);
  });

  it("encodes the backward op with six inputs and three outputs", () => {
    const { node, attributes } = decoded("backward", false, 0.5);
    expect(node.opType).toBe("FlashAttentionGrad");
    expect(node.input).toEqual(["q", "k", "v", "out", "dout", "lse"]);
    expect(node.output).toEqual(["dq", "dk", "dv"]);
    expect(attributes).toEqual({ causal: 0, scale: 0.5 });
  });

  it("adds the two int32 document inputs in the document variant only", () => {
    for (const kind of ["forward", "backward"] as const) {
      const plain = decoded(kind, true, 0.25);
      const { graph, node, attributes, dims } = decoded(kind, true, 0.25, true);
      expect(node.input).toEqual([...plain.node.input, "q_documents", "k_documents"]);
      expect(node.output).toEqual(plain.node.output);
      expect(attributes).toEqual({ causal: 1, scale: 0.25 });
      const documents = graph.input.slice(-2);
      expect(documents.map((v) => v.name)).toEqual(["q_documents", "k_documents"]);
      expect(documents.map((v) => v.type!.tensorType!.elemType)).toEqual([6, 6]); // TensorProto INT32
      expect(documents.map(dims)).toEqual([
        ["batch", "seq_q"],
        ["batch", "seq_k"],
      ]);
      expect(plain.graph.input.map((v) => v.type!.tensorType!.elemType)).toEqual(plain.graph.input.map(() => 1)); // FLOAT
    }
  });
});
