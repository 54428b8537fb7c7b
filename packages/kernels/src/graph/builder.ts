/**
 * A small typed builder for ONNX graphs. It names values, records nodes and
 * initializers, and encodes a ModelProto with the `onnx-proto` package. It
 * knows nothing about running graphs (see `runtime/session-cache.ts`) or about
 * gradients (see `graph/gradients.ts`). `graph/decode.ts` decodes the bytes
 * back for tests; no onnx-proto type appears in this module's exports.
 *
 *   const g = new GraphBuilder("linear");
 *   const x = g.input("x", "float32", ["rows", 64]);
 *   const w = g.input("w", "float32", [64, 32]);
 *   g.output(g.op("MatMul", [x, w]), "y");
 *   const bytes = g.encode();
 */
// onnx-proto is CommonJS without named-export hints: Node ESM (tsx, built
// dist) only sees its default export, so take `onnx` from it.
import onnxProto, { type onnx } from "onnx-proto";
import { KernelError } from "../errors.js";

const proto = onnxProto.onnx;

export type ElementType = "float32" | "float64" | "int32" | "int64" | "bool" | "float16";

const ELEMENT: Record<ElementType, number> = {
  float32: proto.TensorProto.DataType.FLOAT,
  float64: proto.TensorProto.DataType.DOUBLE,
  int32: proto.TensorProto.DataType.INT32,
  int64: proto.TensorProto.DataType.INT64,
  bool: proto.TensorProto.DataType.BOOL,
  float16: proto.TensorProto.DataType.FLOAT16,
};

/** A dimension: a fixed size or a symbolic name. */
export type Dim = number | string;

/** A named value in the graph (an input, an initializer or a node output). */
export interface Value {
  readonly name: string;
}

/** Attributes are tagged so ints and floats are never confused. */
export type Attribute =
  | { kind: "int"; value: number }
  | { kind: "float"; value: number }
  | { kind: "ints"; value: readonly number[] }
  | { kind: "floats"; value: readonly number[] }
  | { kind: "string"; value: string };

export const attr = {
  int: (value: number): Attribute => ({ kind: "int", value }),
  float: (value: number): Attribute => ({ kind: "float", value }),
  ints: (value: readonly number[]): Attribute => ({ kind: "ints", value }),
  floats: (value: readonly number[]): Attribute => ({ kind: "floats", value }),
  string: (value: string): Attribute => ({ kind: "string", value }),
};

export interface OpOptions {
  /** Number of outputs (default 1). */
  outputs?: number;
  domain?: string;
  /** Name hint for the outputs. */
  name?: string;
}

function valueInfo(name: string, type: ElementType, dims: readonly Dim[]): onnx.IValueInfoProto {
  return {
    name,
    type: {
      tensorType: {
        elemType: ELEMENT[type],
        shape: { dim: dims.map((d) => (typeof d === "number" ? { dimValue: d } : { dimParam: d })) },
      },
    },
  };
}

function encodeAttribute(name: string, a: Attribute): onnx.IAttributeProto {
  const T = proto.AttributeProto.AttributeType;
  switch (a.kind) {
    case "int":
      return { name, type: T.INT, i: a.value };
    case "float":
      return { name, type: T.FLOAT, f: a.value };
    case "ints":
      return { name, type: T.INTS, ints: [...a.value] };
    case "floats":
      return { name, type: T.FLOATS, floats: [...a.value] };
    case "string":
      return { name, type: T.STRING, s: new TextEncoder().encode(a.value) };
  }
}

export class GraphBuilder {
  readonly name: string;
  private readonly inputs: onnx.IValueInfoProto[] = [];
  private readonly outputs: onnx.IValueInfoProto[] = [];
  private readonly nodes: onnx.INodeProto[] = [];
  private readonly initializers: onnx.ITensorProto[] = [];
  private readonly names = new Set<string>();
  private readonly domains = new Map<string, number>([["", 17]]);
  private counter = 0;

  constructor(name: string, options: { opset?: number } = {}) {
    this.name = name;
    if (options.opset !== undefined) this.domains.set("", options.opset);
  }

  private fresh(hint: string): string {
    let name = hint;
    while (this.names.has(name)) name = `${hint}_${++this.counter}`;
    this.names.add(name);
    return name;
  }

  /** Declares a graph input. */
  input(name: string, type: ElementType, dims: readonly Dim[]): Value {
    if (this.names.has(name)) throw new KernelError(`graph '${this.name}': value name '${name}' is already used`);
    this.names.add(name);
    this.inputs.push(valueInfo(name, type, dims));
    return { name };
  }

  /** A constant tensor stored in the model (float32, int64 or int32). */
  constant(values: readonly number[] | Float32Array | BigInt64Array, dims: readonly number[], type: ElementType = "float32", hint = "const"): Value {
    const name = this.fresh(hint);
    const size = dims.reduce((a, b) => a * b, 1);
    if (values.length !== size) throw new KernelError(`constant '${name}': dims [${dims.join(", ")}] need ${size} values, got ${values.length}`);
    const tensor: onnx.ITensorProto = { name, dims: [...dims], dataType: ELEMENT[type] };
    if (type === "float32") tensor.floatData = Array.from(values as ArrayLike<number>, Number);
    else if (type === "int64") tensor.int64Data = Array.from(values as ArrayLike<number | bigint>, Number);
    else if (type === "int32") tensor.int32Data = Array.from(values as ArrayLike<number>, Number);
    else if (type === "float64") tensor.doubleData = Array.from(values as ArrayLike<number>, Number);
    else throw new KernelError(`constant '${name}': element type ${type} is not supported for constants`);
    this.initializers.push(tensor);
    return { name };
  }

  /** A scalar float32 constant (shape []). */
  scalar(value: number, hint = "scalar"): Value {
    return this.constant([value], [], "float32", hint);
  }

  /** A 1-D int64 constant, as Reshape/Slice/axes inputs want. */
  int64s(values: readonly number[], hint = "ints"): Value {
    return this.constant(values, [values.length], "int64", hint);
  }

  /** Adds a node; returns its outputs. */
  ops(opType: string, inputs: readonly (Value | null)[], attributes: Record<string, Attribute> = {}, options: OpOptions = {}): Value[] {
    const count = options.outputs ?? 1;
    const domain = options.domain ?? "";
    if (domain !== "" && !this.domains.has(domain)) this.domains.set(domain, 1);
    const outputs = Array.from({ length: count }, (_, i) => this.fresh(`${options.name ?? opType.toLowerCase()}${count > 1 ? `_${i}` : ""}`));
    this.nodes.push({
      opType,
      domain,
      name: this.fresh(`node_${opType}`),
      input: inputs.map((v) => (v === null ? "" : v.name)),
      output: outputs,
      attribute: Object.entries(attributes).map(([k, a]) => encodeAttribute(k, a)),
    });
    return outputs.map((name) => ({ name }));
  }

  /** Adds a single-output node. */
  op(opType: string, inputs: readonly (Value | null)[], attributes: Record<string, Attribute> = {}, options: OpOptions = {}): Value {
    return this.ops(opType, inputs, attributes, { ...options, outputs: 1 })[0]!;
  }

  /** Declares `value` a graph output named `name` (an Identity node renames it when needed). */
  output(value: Value, name: string, type: ElementType = "float32", dims?: readonly Dim[]): void {
    let source = value;
    if (value.name !== name) {
      if (this.names.has(name)) throw new KernelError(`graph '${this.name}': output name '${name}' is already used`);
      this.names.add(name);
      this.nodes.push({ opType: "Identity", domain: "", name: this.fresh("node_Identity"), input: [value.name], output: [name] });
      source = { name };
    }
    const info: onnx.IValueInfoProto = dims ? valueInfo(source.name, type, dims) : { name: source.name, type: { tensorType: { elemType: ELEMENT[type] } } };
    this.outputs.push(info);
  }

  /** Sets the opset version of a domain ("" is the default ONNX domain). */
  useDomain(domain: string, version: number): void {
    this.domains.set(domain, version);
  }

  /** Encodes the graph as ONNX ModelProto bytes. */
  encode(): Uint8Array {
    const model = proto.ModelProto.create({
      irVersion: 8,
      producerName: "ulysses-ts",
      opsetImport: [...this.domains].map(([domain, version]) => ({ domain, version })),
      graph: {
        name: this.name,
        node: this.nodes,
        input: this.inputs,
        output: this.outputs,
        initializer: this.initializers,
      },
    });
    return proto.ModelProto.encode(model).finish();
  }
}
