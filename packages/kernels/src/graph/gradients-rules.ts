/**
 * Vector-Jacobian rules for the ONNX ops the kernels differentiate, each
 * written in terms of ops on the tape and registered on import. Elementwise
 * rules read a node's output where that is cheaper than recomputing it
 * (Tanh, Sigmoid, Exp, Sqrt, Reciprocal, Div). The normalization rules read
 * the saved statistics outputs (Mean, InvStdDev), which backward graphs bind
 * to the values their forward saved.
 */
import { KernelError } from "../errors.js";
import { attr, type Attribute } from "./builder.js";
import { registerGradient, unbroadcast } from "./gradients-registry.js";
import type { Tape, TapeNode, TapeValue } from "./gradients-tape.js";

type Maybe = TapeValue | null;

function intAttribute(node: TapeNode, name: string, fallback: number): number {
  const a: Attribute | undefined = node.attributes[name];
  return a && (a.kind === "int" || a.kind === "float") ? a.value : fallback;
}

function only(op: string, grads: readonly Maybe[]): TapeValue {
  if (grads.slice(1).some((g) => g !== null)) throw new KernelError(`gradient of ${op}: only the first output is differentiable`);
  return grads[0]!;
}

const mul = (t: Tape, a: TapeValue, b: TapeValue) => t.op("Mul", [a, b]);
const sub = (t: Tape, a: TapeValue, b: TapeValue) => t.op("Sub", [a, b]);
const add = (t: Tape, a: TapeValue, b: TapeValue) => t.op("Add", [a, b]);
const scaled = (t: Tape, a: TapeValue, s: number) => t.op("Mul", [a, t.scalar(s, a)]);

/** Registers a rule for an elementwise unary op: dx = dy * f'(x, y). */
function unary(opType: string, derivative: (t: Tape, x: TapeValue, y: TapeValue, dy: TapeValue) => TapeValue): void {
  registerGradient(opType, (t, node, [dy]) => [derivative(t, node.inputs[0]!, node.outputs[0]!, dy!)]);
}

unary("Identity", (_t, _x, _y, dy) => dy);
unary("Neg", (t, _x, _y, dy) => t.op("Neg", [dy]));
unary("Exp", (t, _x, y, dy) => mul(t, dy, y));
unary("Log", (t, x, _y, dy) => t.op("Div", [dy, x]));
// d tanh = 1 - y^2
unary("Tanh", (t, _x, y, dy) => mul(t, dy, sub(t, t.scalar(1, y), mul(t, y, y))));
// d sigmoid = y (1 - y)
unary("Sigmoid", (t, _x, y, dy) => mul(t, dy, mul(t, y, sub(t, t.scalar(1, y), y))));
// d sqrt = 0.5 / y
unary("Sqrt", (t, _x, y, dy) => t.op("Div", [scaled(t, dy, 0.5), y]));
// d (1/x) = -y^2
unary("Reciprocal", (t, _x, y, dy) => t.op("Neg", [mul(t, dy, mul(t, y, y))]));

registerGradient("Add", (t, node, [dy], wants) => node.inputs.map((x, i) => (wants[i] ? unbroadcast(t, dy!, x!.dims) : null)));
registerGradient("Sub", (t, node, [dy], wants) => [
  wants[0] ? unbroadcast(t, dy!, node.inputs[0]!.dims) : null,
  wants[1] ? unbroadcast(t, t.op("Neg", [dy!]), node.inputs[1]!.dims) : null,
]);
registerGradient("Mul", (t, node, [dy], wants) => {
  const [a, b] = node.inputs as [TapeValue, TapeValue];
  return [wants[0] ? unbroadcast(t, mul(t, dy!, b), a.dims) : null, wants[1] ? unbroadcast(t, mul(t, dy!, a), b.dims) : null];
});
// y = a / b: da = dy / b, db = -dy * y / b
registerGradient("Div", (t, node, [dy], wants) => {
  const [a, b] = node.inputs as [TapeValue, TapeValue];
  const y = node.outputs[0]!;
  return [
    wants[0] ? unbroadcast(t, t.op("Div", [dy!, b]), a.dims) : null,
    wants[1] ? unbroadcast(t, t.op("Neg", [t.op("Div", [mul(t, dy!, y), b])]), b.dims) : null,
  ];
});
// y = a^p with a constant scalar p: da = dy * p * a^(p-1)
registerGradient("Pow", (t, node, [dy], wants) => {
  const [a, p] = node.inputs as [TapeValue, TapeValue];
  if (wants[1]) throw new KernelError("gradient of Pow: only the base is differentiable");
  if (p.constant?.length !== 1) throw new KernelError("gradient of Pow: the exponent must be a scalar constant");
  const e = p.constant[0]!;
  const power = e === 2 ? a : t.op("Pow", [a, t.scalar(e - 1, a)]);
  return [unbroadcast(t, mul(t, dy!, scaled(t, power, e)), a.dims), null];
});

/** The matrix product of the last two axes with optional transposes, as Gemm (2-D) or MatMul. */
function matmul(t: Tape, a: TapeValue, b: TapeValue, transA: boolean, transB: boolean): TapeValue {
  if (a.dims.length === 2 && b.dims.length === 2) return t.op("Gemm", [a, b], { transA: attr.int(transA ? 1 : 0), transB: attr.int(transB ? 1 : 0) });
  const swap = (v: TapeValue) => {
    const perm = v.dims.map((_, i) => i);
    [perm[perm.length - 1], perm[perm.length - 2]] = [perm[perm.length - 2]!, perm[perm.length - 1]!];
    // [..., m, n] -> [..., n, m]
    return t.op("Transpose", [v], { perm: attr.ints(perm) });
  };
  return t.op("MatMul", [transA ? swap(a) : a, transB ? swap(b) : b]);
}

// y = a @ b: da = dy @ b^T, db = a^T @ dy (summed over broadcast batch axes)
registerGradient("MatMul", (t, node, [dy], wants) => {
  const [a, b] = node.inputs as [TapeValue, TapeValue];
  if (a.dims.length > 2 && b.dims.length === 2) {
    // Fold the batch axes of a into rows: [..., m, k] -> [rows, k]; dy [..., m, n] -> [rows, n]
    const a2 = t.op("Reshape", [a, t.int64s([-1, a.dims[a.dims.length - 1]!])]);
    const dy2 = t.op("Reshape", [dy!, t.int64s([-1, b.dims[1]!])]);
    return [wants[0] ? t.op("Reshape", [matmul(t, dy2, b, false, true), t.int64s(a.dims)]) : null, wants[1] ? matmul(t, a2, dy2, true, false) : null];
  }
  return [wants[0] ? unbroadcast(t, matmul(t, dy!, b, false, true), a.dims) : null, wants[1] ? unbroadcast(t, matmul(t, a, dy!, true, false), b.dims) : null];
});

// y = op(a) op(b) + c, op = transpose when the flag is set (alpha = beta = 1)
registerGradient("Gemm", (t, node, [dy], wants) => {
  const [a, b, c] = node.inputs;
  if (intAttribute(node, "alpha", 1) !== 1 || intAttribute(node, "beta", 1) !== 1)
    throw new KernelError("gradient of Gemm: only alpha = beta = 1 is supported");
  const ta = intAttribute(node, "transA", 0) === 1,
    tb = intAttribute(node, "transB", 0) === 1;
  // d op(a) = dy op(b)^T ; d op(b) = op(a)^T dy
  const da = !wants[0] ? null : ta ? matmul(t, b!, dy!, tb, true) : matmul(t, dy!, b!, false, !tb);
  const db = !wants[1] ? null : tb ? matmul(t, dy!, a!, true, ta) : matmul(t, a!, dy!, !ta, false);
  return [da, db, wants[2] ? unbroadcast(t, dy!, c!.dims) : null];
});

function reduceAxes(node: TapeNode): number[] {
  const x = node.inputs[0]!;
  const axes = node.inputs[1]?.constant ?? x.dims.map((_, i) => i);
  return axes.map((a) => (a < 0 ? a + x.dims.length : a));
}

/** dy expanded back over the reduced axes: [reduced] -> [keepdims shape] -> x's shape. */
function expandReduced(t: Tape, node: TapeNode, dy: TapeValue): TapeValue {
  const x = node.inputs[0]!;
  const axes = reduceAxes(node);
  const kept = x.dims.map((d, i) => (axes.includes(i) ? 1 : d));
  const shaped = dy.dims.join() === kept.join() ? dy : t.op("Reshape", [dy, t.int64s(kept)]);
  return t.op("Expand", [shaped, t.int64s(x.dims)]);
}

registerGradient("ReduceSum", (t, node, [dy]) => [expandReduced(t, node, dy!), null]);
registerGradient("ReduceMean", (t, node, [dy]) => {
  const x = node.inputs[0]!;
  const count = reduceAxes(node).reduce((n, a) => n * x.dims[a]!, 1);
  return [expandReduced(t, node, scaled(t, dy!, 1 / count)), null];
});

function normalizedAxes(node: TapeNode): number[] {
  const rank = node.inputs[0]!.dims.length;
  const from = intAttribute(node, "axis", -1);
  const start = from < 0 ? from + rank : from;
  return Array.from({ length: rank - start }, (_, i) => start + i);
}

function castLike(t: Tape, v: TapeValue, like: TapeValue): TapeValue {
  if (v.type === like.type) return v;
  return t.op("Cast", [v], { to: attr.int(like.type === "float64" ? 11 : like.type === "float16" ? 10 : 1) });
}

// y = xhat * scale + b, xhat = (x - mean) * rstd:
// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy * scale
registerGradient("LayerNormalization", (t, node, outputGrads, wants) => {
  const dy = only("LayerNormalization", outputGrads);
  const [x, scale, bias] = node.inputs as [TapeValue, TapeValue, Maybe];
  const mean = castLike(t, node.outputs[1]!, x),
    rstd = castLike(t, node.outputs[2]!, x);
  const axes = t.int64s(normalizedAxes(node));
  const keep = { keepdims: attr.int(1) };
  const xhat = mul(t, sub(t, x, mean), rstd);
  let dx: Maybe = null;
  if (wants[0]) {
    const g = mul(t, dy, scale);
    const meanG = t.op("ReduceMean", [g, axes], keep);
    const meanGx = t.op("ReduceMean", [mul(t, g, xhat), axes], keep);
    dx = mul(t, sub(t, sub(t, g, meanG), mul(t, xhat, meanGx)), rstd);
  }
  return [dx, wants[1] ? unbroadcast(t, mul(t, dy, xhat), scale.dims) : null, wants[2] && bias ? unbroadcast(t, dy, bias.dims) : null];
});

// y = xhat * scale, xhat = x * rstd: dx = rstd (g - xhat mean(g xhat)), g = dy * scale
registerGradient("SimplifiedLayerNormalization", (t, node, outputGrads, wants) => {
  const dy = only("SimplifiedLayerNormalization", outputGrads);
  const [x, scale] = node.inputs as [TapeValue, TapeValue];
  const rstd = castLike(t, node.outputs[1]!, x);
  const xhat = mul(t, x, rstd);
  let dx: Maybe = null;
  if (wants[0]) {
    const g = mul(t, dy, scale);
    const meanGx = t.op("ReduceMean", [mul(t, g, xhat), t.int64s(normalizedAxes(node))], { keepdims: attr.int(1) });
    dx = mul(t, sub(t, g, mul(t, xhat, meanGx)), rstd);
  }
  return [dx, wants[1] ? unbroadcast(t, mul(t, dy, xhat), scale.dims) : null];
});

const GELU_C = Math.sqrt(2 / Math.PI);
const GELU_K = 0.044715;

registerGradient("Gelu", (t, node, [dy]) => {
  const x = node.inputs[0]!;
  const a = node.attributes.approximate;
  const approximate = a?.kind === "string" ? a.value : "none";
  if (approximate === "tanh") {
    const x2 = mul(t, x, x);
    // 0.5 (1 + tanh(u)) = sigmoid(2u), u = c (x + k x^3): gelu = x s with s = sigmoid(v), v = 2u,
    // d gelu = s (1 + x (1 - s) v'), v' = 2c (1 + 3 k x^2)
    const s = t.op("Sigmoid", [mul(t, x, add(t, scaled(t, x2, 2 * GELU_C * GELU_K), t.scalar(2 * GELU_C, x)))]);
    const dv = add(t, scaled(t, x2, 6 * GELU_C * GELU_K), t.scalar(2 * GELU_C, x));
    const inner = add(t, t.scalar(1, x), mul(t, mul(t, x, sub(t, t.scalar(1, x), s)), dv));
    return [mul(t, dy!, mul(t, s, inner))];
  }
  throw new KernelError(`gradient of Gelu: only approximate = 'tanh' has a rule, got '${approximate}'`);
});

// Split's gradient concatenates the parts' gradients (zeros where none flows).
registerGradient("Split", (t, node, outputGrads) => {
  const parts = node.outputs.map((o, i) => outputGrads[i] ?? t.op("Expand", [t.scalar(0, o), t.int64s(o.dims)]));
  return [t.op("Concat", parts, { axis: attr.int(intAttribute(node, "axis", 0)) }), null];
});

// Concat's gradient splits dy back into the inputs' sizes.
registerGradient("Concat", (t, node, [dy]) => {
  const axis = intAttribute(node, "axis", 0);
  const rank = dy!.dims.length;
  const ax = axis < 0 ? axis + rank : axis;
  if (node.inputs.length === 1) return [dy];
  return t.ops("Split", [dy!, t.int64s(node.inputs.map((v) => v!.dims[ax]!))], { axis: attr.int(ax) });
});

registerGradient("Reshape", (t, node, [dy]) => [t.op("Reshape", [dy!, t.int64s(node.inputs[0]!.dims)]), null]);

registerGradient("Transpose", (t, node, [dy]) => {
  const x = node.inputs[0]!;
  const p = node.attributes.perm;
  const perm = p?.kind === "ints" ? p.value : x.dims.map((_, i) => x.dims.length - 1 - i);
  const inverse = new Array<number>(perm.length);
  perm.forEach((axis, i) => (inverse[axis] = i));
  return [t.op("Transpose", [dy!], { perm: attr.ints(inverse) })];
});
