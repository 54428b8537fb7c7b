/**
 * Test fixture: encodes a small ONNX model (protobuf wire format, written
 * by hand for the few fields needed) so the ORT interop tests can run a real
 * session without depending on @ulysses/kernels (which depends on us).
 */

/** ONNX TensorProto.DataType codes used by the tests. */
export const ONNX_TYPE = { float32: 1, int32: 6, float16: 10, float64: 11, bfloat16: 16 } as const;

type Bytes = number[];

function varint(value: number): Bytes {
  const out: Bytes = [];
  let v = value;
  while (v >= 0x80) {
    out.push((v % 0x80) | 0x80);
    v = Math.floor(v / 0x80);
  }
  out.push(v);
  return out;
}

function intField(field: number, value: number): Bytes {
  return [...varint(field * 8), ...varint(value)];
}

function bytesField(field: number, payload: Bytes): Bytes {
  return [...varint(field * 8 + 2), ...varint(payload.length), ...payload];
}

function stringField(field: number, text: string): Bytes {
  return bytesField(field, [...new TextEncoder().encode(text)]);
}

export interface ValueInfo {
  name: string;
  elemType: number;
  /** Numbers are fixed sizes; strings are symbolic dimensions. */
  dims: (number | string)[];
}

function valueInfo(v: ValueInfo): Bytes {
  const dims = v.dims.flatMap((d) => bytesField(1, typeof d === "number" ? intField(1, d) : stringField(2, d)));
  const tensorType = [...intField(1, v.elemType), ...bytesField(2, dims)];
  return [...stringField(1, v.name), ...bytesField(2, bytesField(1, tensorType))];
}

export interface NodeSpec {
  opType: string;
  inputs: string[];
  outputs: string[];
  /** Integer attributes, e.g. { to: 10 } for Cast. */
  intAttributes?: Record<string, number>;
}

export interface ModelSpec {
  nodes: NodeSpec[];
  inputs: ValueInfo[];
  outputs: ValueInfo[];
  opset?: number;
}

function node(spec: NodeSpec, index: number): Bytes {
  const attributes = Object.entries(spec.intAttributes ?? {}).flatMap(([name, value]) =>
    bytesField(5, [...stringField(1, name), ...intField(3, value), ...intField(20, 2 /* INT */)]),
  );
  return [
    ...spec.inputs.flatMap((name) => stringField(1, name)),
    ...spec.outputs.flatMap((name) => stringField(2, name)),
    ...stringField(3, `node${index}`),
    ...stringField(4, spec.opType),
    ...attributes,
  ];
}

/** The serialised ModelProto of a graph made of `nodes` (in topological order). */
export function onnxModel(model: ModelSpec): Uint8Array {
  const graph = [
    ...model.nodes.flatMap((n, i) => bytesField(1, node(n, i))),
    ...stringField(2, "fixture"),
    ...model.inputs.flatMap((i) => bytesField(11, valueInfo(i))),
    ...model.outputs.flatMap((o) => bytesField(12, valueInfo(o))),
  ];
  const opset = [...stringField(1, ""), ...intField(2, model.opset ?? 17)];
  return new Uint8Array([...intField(1, 8 /* IR version */), ...stringField(2, "ulysses-tensors-test"), ...bytesField(7, graph), ...bytesField(8, opset)]);
}
