/**
 * The Tape: a recorded ONNX segment with static shapes, from which forward and
 * backward graphs are emitted. Ops are recorded, not emitted; `encode` emits
 * only the nodes the outputs need (depth first), so a backward graph built by
 * replaying the forward segment carries no dead forward nodes.
 *
 * Two things make replay useful for backward graphs:
 * - `bind(value, replacement)`: every consumer of `value` reads `replacement`
 *   instead (a saved activation fed as an input, or an expression of one), and
 *   the node that produced `value` is emitted only if another output is used.
 * - `placeholder(...)`: a value known only by its shape (an input the backward
 *   never reads, such as beta for LayerNorm's gradient). Emitting a graph that
 *   needs a placeholder's data throws.
 *
 * TapeValue and TapeNode live in `gradients-types.ts`, shape inference in
 * `gradients-shapes.ts`, the vector-Jacobian rules in `gradients.ts` and
 * `gradients-rules.ts`; this module knows neither rule.
 */
import { KernelError } from "../errors.js";
import { GraphBuilder, type Attribute, type ElementType, type Value } from "./builder.js";
import { inferShapes } from "./gradients-shapes.js";
import type { TapeNode, TapeValue } from "./gradients-types.js";

export type { TapeNode, TapeValue } from "./gradients-types.js";

type Source =
  | { kind: "input"; name: string }
  | { kind: "constant"; values: readonly number[] }
  | { kind: "placeholder"; hint: string }
  | { kind: "node"; node: TapeNode; index: number };

export const FLOAT_TYPES: readonly ElementType[] = ["float32", "float64", "float16"];

export class Tape {
  readonly name: string;
  readonly opset: number;
  /** Recorded nodes, in recording order. */
  readonly nodes: TapeNode[] = [];
  private readonly sources = new Map<number, Source>();
  private readonly bindings = new Map<number, TapeValue>();
  private readonly outputs: { value: TapeValue; name: string }[] = [];
  private readonly inputOrder: { name: string; value: TapeValue }[] = [];
  private nextId = 0;

  constructor(name: string, options: { opset?: number } = {}) {
    this.name = name;
    this.opset = options.opset ?? 20;
  }

  private value(dims: readonly number[], type: ElementType, source: Source, constant?: readonly number[]): TapeValue {
    const v: TapeValue = constant === undefined ? { id: this.nextId++, dims: [...dims], type } : { id: this.nextId++, dims: [...dims], type, constant };
    this.sources.set(v.id, source);
    return v;
  }

  /** A graph input with a static shape. */
  input(name: string, type: ElementType, dims: readonly number[]): TapeValue {
    if (this.inputOrder.some((i) => i.name === name)) throw new KernelError(`tape '${this.name}': input '${name}' is declared twice`);
    const v = this.value(dims, type, { kind: "input", name });
    this.inputOrder.push({ name, value: v });
    return v;
  }

  /** A value known only by shape; its data must never be needed. */
  placeholder(hint: string, type: ElementType, dims: readonly number[]): TapeValue {
    return this.value(dims, type, { kind: "placeholder", hint });
  }

  /** A constant tensor (float types, int64 or int32). */
  constant(values: readonly number[], dims: readonly number[], type: ElementType): TapeValue {
    const size = dims.reduce((a, b) => a * b, 1);
    if (values.length !== size) throw new KernelError(`tape '${this.name}': constant of shape [${dims.join(", ")}] needs ${size} values, got ${values.length}`);
    return this.value(dims, type, { kind: "constant", values: [...values] }, values);
  }

  /** A scalar constant of the same element type as `like`. */
  scalar(value: number, like: TapeValue): TapeValue {
    return this.constant([value], [], like.type);
  }

  /** A 1-D int64 constant (axes, shapes, split sizes). */
  int64s(values: readonly number[]): TapeValue {
    return this.constant(values, [values.length], "int64");
  }

  /** Records a node; output shapes come from the op's shape function. */
  ops(opType: string, inputs: readonly (TapeValue | null)[], attributes: Record<string, Attribute> = {}, domain = ""): TapeValue[] {
    const shapes = inferShapes(opType, inputs, attributes);
    const outputs: TapeValue[] = [];
    const node: TapeNode = { opType, domain, inputs: [...inputs], outputs, attributes: { ...attributes } };
    shapes.forEach((s, index) => outputs.push(this.value(s.dims, s.type, { kind: "node", node, index })));
    this.nodes.push(node);
    return outputs;
  }

  /** Records a single-output node. */
  op(opType: string, inputs: readonly (TapeValue | null)[], attributes: Record<string, Attribute> = {}, domain = ""): TapeValue {
    return this.ops(opType, inputs, attributes, domain)[0]!;
  }

  /** Consumers of `value` read `replacement` instead (same shape and type). */
  bind(value: TapeValue, replacement: TapeValue): void {
    if (value.type !== replacement.type || value.dims.join() !== replacement.dims.join()) {
      throw new KernelError(
        `tape '${this.name}': cannot bind a ${value.type} [${value.dims.join(", ")}] value to a ${replacement.type} [${replacement.dims.join(", ")}] one`,
      );
    }
    this.bindings.set(value.id, replacement);
  }

  /** Follows bindings to the value that is actually read. */
  resolve(value: TapeValue): TapeValue {
    let v = value;
    const seen = new Set<number>();
    for (let next = this.bindings.get(v.id); next; next = this.bindings.get(v.id)) {
      if (seen.has(v.id)) throw new KernelError(`tape '${this.name}': bindings form a cycle at value ${v.id}`);
      seen.add(v.id);
      v = next;
    }
    return v;
  }

  /** Declares a graph output. */
  output(value: TapeValue, name: string): void {
    this.outputs.push({ value, name });
  }

  /** Emits the nodes the outputs need and encodes the ONNX model. */
  encode(): Uint8Array {
    const g = new GraphBuilder(this.name, { opset: this.opset });
    const emitted = new Map<number, Value>();
    for (const { name, value } of this.inputOrder) emitted.set(value.id, g.input(name, value.type, value.dims));
    const onPath = new Set<TapeNode>();
    const emitNode = (node: TapeNode): void => {
      if (onPath.has(node)) throw new KernelError(`tape '${this.name}': a binding makes ${node.opType} depend on itself`);
      onPath.add(node);
      const ins = node.inputs.map((i) => (i === null ? null : emit(i)));
      const outs = g.ops(node.opType, ins, { ...node.attributes }, { outputs: node.outputs.length, domain: node.domain });
      node.outputs.forEach((o, i) => emitted.set(o.id, outs[i]!));
      onPath.delete(node);
    };
    const emit = (value: TapeValue): Value => {
      const v = this.resolve(value);
      const done = emitted.get(v.id);
      if (done) return done;
      const source = this.sources.get(v.id)!;
      switch (source.kind) {
        case "input":
          throw new KernelError(`tape '${this.name}': input '${source.name}' was not declared on this tape`);
        case "placeholder":
          throw new KernelError(`tape '${this.name}': the graph needs the data of placeholder '${source.hint}' [${v.dims.join(", ")}]`);
        case "constant": {
          const c = g.constant(source.values, v.dims, v.type);
          emitted.set(v.id, c);
          return c;
        }
        case "node":
          emitNode(source.node);
          return emitted.get(v.id)!;
      }
    };
    for (const { value, name } of this.outputs) {
      const v = this.resolve(value);
      g.output(emit(v), name, v.type, v.dims);
    }
    return g.encode();
  }
}

/** Throws unless `value` has a floating-point element type. */
export function assertFloat(op: string, value: TapeValue): void {
  if (!FLOAT_TYPES.includes(value.type)) throw new KernelError(`${op}: expected a floating-point value, got ${value.type}`);
}
