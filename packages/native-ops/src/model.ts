/**
 * The two ONNX graphs our sessions run, encoded with `onnx-proto`: one node
 * each, from the "ulysses" custom-op domain (see native/src/custom-ops.h):
 *
 *   FlashAttention(q, k, v [, q_documents, k_documents]) -> (out, lse)
 *   FlashAttentionGrad(q, k, v, out, dout, lse [, q_documents, k_documents]) -> (dq, dk, dv)
 *
 * with attributes causal (int) and scale (float). The document variant of
 * each graph adds the two optional int32 inputs (document ids, [batch, seq_q]
 * and [batch, seq_k]) that mask attention to each query's own document. Every dimension is
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

/** Input and output names, in the order the ops declare them (without the document inputs). */
export const GRAPH_IO: Record<GraphKind, { op: string; inputs: readonly string[]; outputs: readonly string[] }> = {
  forward: { op: "FlashAttention", inputs: ["q", "k", "v"], outputs: ["out", "lse"] },
  backward: { op: "FlashAttentionGrad", inputs: ["q", "k", "v", "out", "dout", "lse"], outputs: ["dq", "dk", "dv"] },
};

/** The document variant's two extra inputs, after GRAPH_IO's: int32 [batch, seq_q] and [batch, seq_k]. */
export const DOCUMENT_INPUTS = ["q_documents", "k_documents"] as const;

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
  q_documents: ["batch", "seq_q"],
  k_documents: ["batch", "seq_k"],
};

function valueInfo(name: string): onnx.IValueInfoProto {
  const T = proto.TensorProto.DataType;
  const elemType = (DOCUMENT_INPUTS as readonly string[]).includes(name) ? T.INT32 : T.FLOAT;
  return { name, type: { tensorType: { elemType, shape: { dim: DIMS[name]!.map((dimParam) => ({ dimParam })) } } } };
}

/**
 * ModelProto bytes of the forward or backward graph for one (causal, scale);
 * `documents` adds the document inputs (DOCUMENT_INPUTS).
 */
export function attentionModel(kind: GraphKind, causal: boolean, scale: number, documents = false): Uint8Array {
  const io = GRAPH_IO[kind];
  const inputs = documents ? [...io.inputs, ...DOCUMENT_INPUTS] : [...io.inputs];
  const T = proto.AttributeProto.AttributeType;
  const model = proto.ModelProto.create({
    irVersion: 8,
    producerName: "ulysses-ts",
    opsetImport: [
      { domain: "", version: 17 },
      { domain: CUSTOM_OP_DOMAIN, version: 1 },
    ],
    graph: {
      name: `fused_attention_${kind}${documents ? "_documents" : ""}`,
      node: [
        {
          opType: io.op,
          domain: CUSTOM_OP_DOMAIN,
          name: io.op,
          input: inputs,
          output: [...io.outputs],
          attribute: [
            { name: "causal", type: T.INT, i: causal ? 1 : 0 },
            { name: "scale", type: T.FLOAT, f: scale },
          ],
        },
      ],
      input: inputs.map(valueInfo),
      output: io.outputs.map(valueInfo),
    },
  });
  return proto.ModelProto.encode(model).finish();
}
