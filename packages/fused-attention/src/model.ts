/**
 * The two ONNX graphs our sessions run, encoded with `onnx-proto`: one node
 * each, from the "ulysses" custom-op domain (see native/src/custom-ops.h):
 *
 *   FlashAttention(q, k, v) -> (out, lse)
 *   FlashAttentionGrad(q, k, v, out, dout, lse) -> (dq, dk, dv)
 *
 * with attributes causal (int) and scale (float). Every dimension is
 * symbolic, so one session serves every shape. Running them is the binding's
 * job (`native.ts`); tests decode them with `decodeModel` of @ulysses/kernels.
 * No onnx-proto type appears in this module's exports (its typings need
 * protobufjs's global `Long`, which a strict consumer does not have).
 */
// onnx-proto is CommonJS without named-export hints: Node ESM only sees its
// default export.
import onnxProto, { type onnx } from "onnx-proto";

const proto = onnxProto.onnx;

export const CUSTOM_OP_DOMAIN = "ulysses";

export type GraphKind = "forward" | "backward";

/** Input and output names, in the order the ops declare them. */
export const GRAPH_IO: Record<GraphKind, { op: string; inputs: readonly string[]; outputs: readonly string[] }> = {
  forward: { op: "FlashAttention", inputs: ["q", "k", "v"], outputs: ["out", "lse"] },
  backward: { op: "FlashAttentionGrad", inputs: ["q", "k", "v", "out", "dout", "lse"], outputs: ["dq", "dk", "dv"] },
};

const QUERY_DIMS = ["batch", "seq_q", "heads", "head_dim"];
const KEY_DIMS = ["batch", "seq_k", "kv_heads", "head_dim"];
const LSE_DIMS = ["batch", "heads", "seq_q"];

const DIMS: Record<string, readonly string[]> = {
  q: QUERY_DIMS,
  out: QUERY_DIMS,
  dout: QUERY_DIMS,
  dq: QUERY_DIMS,
  k: KEY_DIMS,
  v: KEY_DIMS,
  dk: KEY_DIMS,
  dv: KEY_DIMS,
  lse: LSE_DIMS,
};

function valueInfo(name: string): onnx.IValueInfoProto {
  return {
    name,
    type: { tensorType: { elemType: proto.TensorProto.DataType.FLOAT, shape: { dim: DIMS[name]!.map((dimParam) => ({ dimParam })) } } },
  };
}

/** ModelProto bytes of the forward or backward graph for one (causal, scale). */
export function attentionModel(kind: GraphKind, causal: boolean, scale: number): Uint8Array {
  const io = GRAPH_IO[kind];
  const T = proto.AttributeProto.AttributeType;
  const model = proto.ModelProto.create({
    irVersion: 8,
    producerName: "ulysses-ts",
    opsetImport: [
      { domain: "", version: 17 },
      { domain: CUSTOM_OP_DOMAIN, version: 1 },
    ],
    graph: {
      name: `fused_attention_${kind}`,
      node: [
        {
          opType: io.op,
          domain: CUSTOM_OP_DOMAIN,
          name: io.op,
          input: [...io.inputs],
          output: [...io.outputs],
          attribute: [
            { name: "causal", type: T.INT, i: causal ? 1 : 0 },
            { name: "scale", type: T.FLOAT, f: scale },
          ],
        },
      ],
      input: io.inputs.map(valueInfo),
      output: io.outputs.map(valueInfo),
    },
  });
  return proto.ModelProto.encode(model).finish();
}
