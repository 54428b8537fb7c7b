/**
 * Static shape inference for the ONNX ops the tape records. Graphs here are
 * built for one set of input shapes, so every value has a known shape, which
 * the gradient rules need (to undo broadcasting, to expand reductions). Only
 * the ops the kernels use are covered; any other op type throws.
 */
import { KernelError } from "../errors.js";
import type { Attribute, ElementType } from "./builder.js";
import type { TapeValue } from "./gradients-types.js";

export interface InferredShape {
  dims: number[];
  type: ElementType;
}

type ShapeFn = (inputs: readonly (TapeValue | null)[], attrs: Readonly<Record<string, Attribute>>, op: string) => InferredShape[];

/** ONNX TensorProto.DataType numbers for Cast's `to`. */
const CAST_TYPES: Record<number, ElementType> = { 1: "float32", 6: "int32", 7: "int64", 9: "bool", 10: "float16", 11: "float64" };

function intAttr(attrs: Readonly<Record<string, Attribute>>, name: string, fallback: number): number {
  const a = attrs[name];
  return a && (a.kind === "int" || a.kind === "float") ? a.value : fallback;
}

function intsAttr(attrs: Readonly<Record<string, Attribute>>, name: string): readonly number[] | undefined {
  const a = attrs[name];
  return a && (a.kind === "ints" || a.kind === "floats") ? a.value : undefined;
}

function need(op: string, inputs: readonly (TapeValue | null)[], i: number): TapeValue {
  const v = inputs[i];
  if (!v) throw new KernelError(`${op}: input ${i} is required`);
  return v;
}

function constantOf(op: string, v: TapeValue | null | undefined, what: string): readonly number[] {
  if (!v || v.constant === undefined) throw new KernelError(`${op}: ${what} must be a constant for static shapes`);
  return v.constant;
}

function axis(op: string, a: number, rank: number): number {
  const r = a < 0 ? a + rank : a;
  if (r < 0 || r >= rank) throw new KernelError(`${op}: axis ${a} is out of range for rank ${rank}`);
  return r;
}

/** Numpy-style broadcast of several shapes. */
export function broadcastDims(op: string, shapes: readonly (readonly number[])[]): number[] {
  const rank = Math.max(...shapes.map((s) => s.length));
  const out: number[] = [];
  for (let i = 0; i < rank; i++) {
    let d = 1;
    for (const s of shapes) {
      const v = s[s.length - rank + i] ?? 1;
      if (v === 1) continue;
      if (d !== 1 && d !== v) throw new KernelError(`${op}: shapes ${shapes.map((s) => `[${s.join(", ")}]`).join(" and ")} do not broadcast`);
      d = v;
    }
    out.push(d);
  }
  return out;
}

const same: ShapeFn = (inputs, _a, op) => [{ dims: [...need(op, inputs, 0).dims], type: need(op, inputs, 0).type }];

const broadcast =
  (type?: ElementType): ShapeFn =>
  (inputs, _a, op) => [
    {
      dims: broadcastDims(
        op,
        inputs.map((_v, i) => need(op, inputs, i).dims),
      ),
      type: type ?? need(op, inputs, 0).type,
    },
  ];

const reduce: ShapeFn = (inputs, attrs, op) => {
  const x = need(op, inputs, 0);
  const keep = intAttr(attrs, "keepdims", 1) === 1;
  const axes = inputs[1] ? constantOf(op, inputs[1], "axes").map((a) => axis(op, a, x.dims.length)) : x.dims.map((_, i) => i);
  const dims = keep ? x.dims.map((d, i) => (axes.includes(i) ? 1 : d)) : x.dims.filter((_, i) => !axes.includes(i));
  return [{ dims, type: x.type }];
};

/** LayerNormalization-like: Y like X, then statistics with the normalized axes kept as 1. */
const normalization =
  (statistics: number): ShapeFn =>
  (inputs, attrs, op) => {
    const x = need(op, inputs, 0);
    const from = axis(op, intAttr(attrs, "axis", -1), x.dims.length);
    // The statistics have the stash type (default 1: float32), whatever X is.
    const statType = CAST_TYPES[intAttr(attrs, "stash_type", 1)] ?? "float32";
    const stat = { dims: x.dims.map((d, i) => (i >= from ? 1 : d)), type: statType };
    return [{ dims: [...x.dims], type: x.type }, ...Array.from({ length: statistics }, () => ({ ...stat, dims: [...stat.dims] }))];
  };

const SHAPES: Record<string, ShapeFn> = {
  Identity: same,
  Neg: same,
  Tanh: same,
  Sigmoid: same,
  Exp: same,
  Log: same,
  Sqrt: same,
  Reciprocal: same,
  Abs: same,
  Relu: same,
  Erf: same,
  Gelu: same,
  Softmax: same,
  LogSoftmax: same,
  Add: broadcast(),
  Sub: broadcast(),
  Mul: broadcast(),
  Div: broadcast(),
  Pow: (inputs, _a, op) => [{ dims: broadcastDims(op, [need(op, inputs, 0).dims, need(op, inputs, 1).dims]), type: need(op, inputs, 0).type }],
  Equal: broadcast("bool"),
  Less: broadcast("bool"),
  Greater: broadcast("bool"),
  Where: (inputs, _a, op) => [
    {
      dims: broadcastDims(
        op,
        [0, 1, 2].map((i) => need(op, inputs, i).dims),
      ),
      type: need(op, inputs, 1).type,
    },
  ],
  Cast: (inputs, attrs, op) => {
    const to = CAST_TYPES[intAttr(attrs, "to", 0)];
    if (!to) throw new KernelError(`${op}: unsupported 'to' ${intAttr(attrs, "to", 0)}`);
    return [{ dims: [...need(op, inputs, 0).dims], type: to }];
  },
  MatMul: (inputs, _a, op) => {
    const a = need(op, inputs, 0),
      b = need(op, inputs, 1);
    if (a.dims.length < 2 || b.dims.length < 2)
      throw new KernelError(`${op}: operands must have rank >= 2, got [${a.dims.join(", ")}] and [${b.dims.join(", ")}]`);
    const [m, k] = a.dims.slice(-2) as [number, number];
    const [k2, n] = b.dims.slice(-2) as [number, number];
    if (k !== k2) throw new KernelError(`${op}: inner dimensions differ: [${a.dims.join(", ")}] @ [${b.dims.join(", ")}]`);
    return [{ dims: [...broadcastDims(op, [a.dims.slice(0, -2), b.dims.slice(0, -2)]), m, n], type: a.type }];
  },
  Gemm: (inputs, attrs, op) => {
    const a = need(op, inputs, 0),
      b = need(op, inputs, 1);
    if (a.dims.length !== 2 || b.dims.length !== 2) throw new KernelError(`${op}: operands must be 2-D`);
    const [m, k] = intAttr(attrs, "transA", 0) ? [a.dims[1]!, a.dims[0]!] : [a.dims[0]!, a.dims[1]!];
    const [k2, n] = intAttr(attrs, "transB", 0) ? [b.dims[1]!, b.dims[0]!] : [b.dims[0]!, b.dims[1]!];
    if (k !== k2) throw new KernelError(`${op}: inner dimensions differ (${k} vs ${k2})`);
    if (inputs[2]) broadcastDims(op, [[m, n], inputs[2].dims]);
    return [{ dims: [m, n], type: a.type }];
  },
  ReduceSum: reduce,
  ReduceMean: reduce,
  ReduceMax: reduce,
  ReduceLogSumExp: reduce,
  LayerNormalization: normalization(2),
  SimplifiedLayerNormalization: normalization(1),
  Split: (inputs, attrs, op) => {
    const x = need(op, inputs, 0);
    const ax = axis(op, intAttr(attrs, "axis", 0), x.dims.length);
    const sizes = constantOf(op, inputs[1], "split");
    if (sizes.reduce((a, b) => a + b, 0) !== x.dims[ax]) throw new KernelError(`${op}: split sizes [${sizes.join(", ")}] do not sum to ${x.dims[ax]}`);
    return sizes.map((s) => ({ dims: x.dims.map((d, i) => (i === ax ? s : d)), type: x.type }));
  },
  Concat: (inputs, attrs, op) => {
    const first = need(op, inputs, 0);
    const ax = axis(op, intAttr(attrs, "axis", 0), first.dims.length);
    const total = inputs.reduce((sum, _v, i) => sum + need(op, inputs, i).dims[ax]!, 0);
    return [{ dims: first.dims.map((d, i) => (i === ax ? total : d)), type: first.type }];
  },
  Reshape: (inputs, _a, op) => {
    const x = need(op, inputs, 0);
    const target = constantOf(op, inputs[1], "shape").map((d, i) => (d === 0 ? x.dims[i]! : d));
    const size = x.dims.reduce((a, b) => a * b, 1);
    const known = target.reduce((a, d) => (d === -1 ? a : a * d), 1);
    const dims = target.map((d) => (d === -1 ? size / known : d));
    if (dims.reduce((a, b) => a * b, 1) !== size) throw new KernelError(`${op}: cannot reshape [${x.dims.join(", ")}] to [${target.join(", ")}]`);
    return [{ dims, type: x.type }];
  },
  Expand: (inputs, _a, op) => [{ dims: broadcastDims(op, [need(op, inputs, 0).dims, constantOf(op, inputs[1], "shape")]), type: need(op, inputs, 0).type }],
  Transpose: (inputs, attrs, op) => {
    const x = need(op, inputs, 0);
    const perm = intsAttr(attrs, "perm") ?? x.dims.map((_, i) => x.dims.length - 1 - i);
    return [{ dims: perm.map((p) => x.dims[p]!), type: x.type }];
  },
  Gather: (inputs, attrs, op) => {
    const data = need(op, inputs, 0),
      indices = need(op, inputs, 1);
    const ax = axis(op, intAttr(attrs, "axis", 0), data.dims.length);
    return [{ dims: [...data.dims.slice(0, ax), ...indices.dims, ...data.dims.slice(ax + 1)], type: data.type }];
  },
};

/** Output shapes and types of `opType` on `inputs`. */
export function inferShapes(opType: string, inputs: readonly (TapeValue | null)[], attrs: Readonly<Record<string, Attribute>>): InferredShape[] {
  const fn = SHAPES[opType];
  if (!fn) throw new KernelError(`no static shape function for op '${opType}'; known: ${Object.keys(SHAPES).join(", ")}`);
  return fn(inputs, attrs, opType);
}
