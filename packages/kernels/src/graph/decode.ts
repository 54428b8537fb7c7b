/**
 * Decodes ONNX ModelProto bytes into plain objects of our own types, for
 * tests and tooling that inspect the graphs `GraphBuilder` encodes. The
 * protobuf classes of `onnx-proto` stay inside this module: its typings need
 * protobufjs's global `Long`, which a strict consumer of our published .d.ts
 * does not have. Encoding is `builder.ts`'s job.
 *
 *   const model = decodeModel(new GraphBuilder("g").encode());
 *   model.graph.node.map((n) => n.opType);
 */
// onnx-proto is CommonJS without named-export hints: Node ESM only sees its
// default export.
import onnxProto from "onnx-proto";

const proto = onnxProto.onnx;

/** One dimension of a value's shape: a fixed size or a symbolic name. */
export interface DecodedDim {
  dimValue?: number;
  dimParam?: string;
}

/** A graph input or output with its element type (ONNX TensorProto.DataType) and shape. */
export interface DecodedValueInfo {
  name: string;
  type: { tensorType?: { elemType: number; shape: { dim: DecodedDim[] } | null } } | null;
}

/** A node attribute; `type` is ONNX's AttributeProto.AttributeType, the other fields hold the value. */
export interface DecodedAttribute {
  name: string;
  type: number;
  i: number;
  f: number;
  s: Uint8Array;
  ints: number[];
  floats: number[];
}

export interface DecodedNode {
  name: string;
  opType: string;
  domain: string;
  input: string[];
  output: string[];
  attribute: DecodedAttribute[];
}

/** An initializer; only the data field of its `dataType` is filled. */
export interface DecodedTensor {
  name: string;
  dims: number[];
  dataType: number;
  floatData: number[];
  doubleData: number[];
  int32Data: number[];
  int64Data: number[];
}

export interface DecodedGraph {
  name: string;
  node: DecodedNode[];
  input: DecodedValueInfo[];
  output: DecodedValueInfo[];
  initializer: DecodedTensor[];
}

export interface DecodedModel {
  irVersion: number;
  producerName: string;
  opsetImport: { domain: string; version: number }[];
  graph: DecodedGraph;
}

/** Decodes ModelProto bytes (for tests and tooling); 64-bit integers become numbers. */
export function decodeModel(bytes: Uint8Array): DecodedModel {
  const message = proto.ModelProto.decode(bytes);
  // Plain objects: numbers for int64 fields, Uint8Array for bytes, [] and 0/""
  // for absent repeated and scalar fields; oneof members only when set.
  const plain = proto.ModelProto.toObject(message, { longs: Number, bytes: Uint8Array, defaults: true, arrays: true });
  const model = plain as unknown as DecodedModel;
  if (model.graph === null || model.graph === undefined) {
    model.graph = { name: "", node: [], input: [], output: [], initializer: [] };
  }
  return model;
}
