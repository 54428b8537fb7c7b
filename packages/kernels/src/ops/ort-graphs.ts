/**
 * The ONNX graphs of the block's ops, built for fixed shapes. Each op's
 * forward is a segment recorded on a Tape; its backward graph replays the same
 * segment, binds the statistics forward saved, and is derived by the gradient
 * registry (reverse walk over the segment's nodes). Hand-written graphs are
 * used only where the op is not a differentiable graph: cross-entropy's
 * backward (softmax scaled per row; the one-hot subtraction is O(rows) and
 * done by the caller) and embedding (forward only: Gather). Running the graphs
 * and validating arguments is `ort-ops.ts`'s job.
 */
import { attr } from "../graph/builder.js";
import { gradients } from "../graph/gradients.js";
import { Tape, type TapeValue } from "../graph/gradients-tape.js";

const OPSET = 20;

function tape(name: string): Tape {
  return new Tape(name, { opset: OPSET });
}

// ---- linear: y [rows, out] = x [rows, in] @ w [in, out] (+ b [out])

function linearSegment(t: Tape, x: TapeValue, w: TapeValue, b?: TapeValue): TapeValue {
  return t.op("Gemm", b ? [x, w, b] : [x, w]);
}

export function linearForwardGraph(rows: number, inF: number, outF: number, bias: boolean): Uint8Array {
  const t = tape("linear_forward");
  const x = t.input("x", "float32", [rows, inF]);
  const w = t.input("w", "float32", [inF, outF]);
  t.output(linearSegment(t, x, w, bias ? t.input("b", "float32", [outF]) : undefined), "y");
  return t.encode();
}

/** Derived: dx = dy w^T, dw = x^T dy (two Gemms), db = sum of dy's rows; one graph. */
export function linearBackwardGraph(rows: number, inF: number, outF: number, bias: boolean): Uint8Array {
  const t = tape("linear_backward");
  const x = t.input("x", "float32", [rows, inF]);
  const w = t.input("w", "float32", [inF, outF]);
  const b = bias ? t.placeholder("b", "float32", [outF]) : undefined;
  const y = linearSegment(t, x, w, b);
  const grads = gradients(t, [y], [t.input("dy", "float32", [rows, outF])], b ? [x, w, b] : [x, w]);
  ["dx", "dw", "db"].slice(0, grads.length).forEach((name, i) => t.output(grads[i]!, name));
  return t.encode();
}

/**
 * Derived: one of linearBackwardGraph's gradients alone, no bias: "x" gives
 * dx = dy w^T (inputs w, dy), "w" gives dw = x^T dy (inputs x, dy). The other
 * operand is a placeholder, so the graph neither takes nor computes it.
 */
export function linearGradientGraph(rows: number, inF: number, outF: number, wrt: "x" | "w"): Uint8Array {
  const t = tape(`linear_${wrt}_gradient`);
  const x = wrt === "w" ? t.input("x", "float32", [rows, inF]) : t.placeholder("x", "float32", [rows, inF]);
  const w = wrt === "x" ? t.input("w", "float32", [inF, outF]) : t.placeholder("w", "float32", [inF, outF]);
  const y = linearSegment(t, x, w);
  const [grad] = gradients(t, [y], [t.input("dy", "float32", [rows, outF])], [wrt === "x" ? x : w]);
  t.output(grad!, `d${wrt}`);
  return t.encode();
}

// ---- layerNorm over the last axis of x [rows, hidden]

function layerNormSegment(t: Tape, x: TapeValue, gamma: TapeValue, beta: TapeValue, eps: number): TapeValue[] {
  return t.ops("LayerNormalization", [x, gamma, beta], { axis: attr.int(-1), epsilon: attr.float(eps) });
}

/** Outputs y [rows, hidden], mean and rstd [rows, 1]. */
export function layerNormForwardGraph(rows: number, hidden: number, eps: number): Uint8Array {
  const t = tape("layer_norm_forward");
  const x = t.input("x", "float32", [rows, hidden]);
  const [y, mean, rstd] = layerNormSegment(t, x, t.input("gamma", "float32", [hidden]), t.input("beta", "float32", [hidden]), eps);
  t.output(y!, "y");
  t.output(mean!, "mean");
  t.output(rstd!, "rstd");
  return t.encode();
}

/** Derived through LayerNormalization's rule, with mean and rstd [rows, 1] bound to the saved values. */
export function layerNormBackwardGraph(rows: number, hidden: number): Uint8Array {
  const t = tape("layer_norm_backward");
  const x = t.input("x", "float32", [rows, hidden]);
  const gamma = t.input("gamma", "float32", [hidden]);
  // beta's value never enters the gradient; epsilon only enters through the saved rstd.
  const beta = t.placeholder("beta", "float32", [hidden]);
  const [y, mean, rstd] = layerNormSegment(t, x, gamma, beta, 0);
  t.bind(mean!, t.input("mean", "float32", [rows, 1]));
  t.bind(rstd!, t.input("rstd", "float32", [rows, 1]));
  const [dx, dGamma, dBeta] = gradients(t, [y!], [t.input("dy", "float32", [rows, hidden])], [x, gamma, beta]);
  t.output(dx!, "dx");
  t.output(dGamma!, "dGamma");
  t.output(dBeta!, "dBeta");
  return t.encode();
}

// ---- rmsNorm over the last axis of x [rows, hidden]

function rmsNormSegment(t: Tape, x: TapeValue, gamma: TapeValue, eps: number): TapeValue[] {
  return t.ops("SimplifiedLayerNormalization", [x, gamma], { axis: attr.int(-1), epsilon: attr.float(eps) });
}

/** Outputs y [rows, hidden] and rstd [rows, 1]. */
export function rmsNormForwardGraph(rows: number, hidden: number, eps: number): Uint8Array {
  const t = tape("rms_norm_forward");
  const [y, rstd] = rmsNormSegment(t, t.input("x", "float32", [rows, hidden]), t.input("gamma", "float32", [hidden]), eps);
  t.output(y!, "y");
  t.output(rstd!, "rstd");
  return t.encode();
}

/** Derived through SimplifiedLayerNormalization's rule, with rstd [rows, 1] bound to the saved value. */
export function rmsNormBackwardGraph(rows: number, hidden: number): Uint8Array {
  const t = tape("rms_norm_backward");
  const x = t.input("x", "float32", [rows, hidden]);
  const gamma = t.input("gamma", "float32", [hidden]);
  const [y, rstd] = rmsNormSegment(t, x, gamma, 0);
  t.bind(rstd!, t.input("rstd", "float32", [rows, 1]));
  const [dx, dGamma] = gradients(t, [y!], [t.input("dy", "float32", [rows, hidden])], [x, gamma]);
  t.output(dx!, "dx");
  t.output(dGamma!, "dGamma");
  return t.encode();
}

// ---- elementwise activations on a flat [size] view

function geluSegment(t: Tape, x: TapeValue): TapeValue {
  return t.op("Gelu", [x], { approximate: attr.string("tanh") });
}

export function geluForwardGraph(size: number): Uint8Array {
  const t = tape("gelu_forward");
  t.output(geluSegment(t, t.input("x", "float32", [size])), "y");
  return t.encode();
}

export function geluBackwardGraph(size: number): Uint8Array {
  const t = tape("gelu_backward");
  const x = t.input("x", "float32", [size]);
  const [dx] = gradients(t, [geluSegment(t, x)], [t.input("dy", "float32", [size])], [x]);
  t.output(dx!, "dx");
  return t.encode();
}

/** y = gate * sigmoid(gate) * up */
function swigluSegment(t: Tape, gate: TapeValue, up: TapeValue): TapeValue {
  return t.op("Mul", [t.op("Mul", [gate, t.op("Sigmoid", [gate])]), up]);
}

export function swigluForwardGraph(size: number): Uint8Array {
  const t = tape("swiglu_forward");
  t.output(swigluSegment(t, t.input("gate", "float32", [size]), t.input("up", "float32", [size])), "y");
  return t.encode();
}

export function swigluBackwardGraph(size: number): Uint8Array {
  const t = tape("swiglu_backward");
  const gate = t.input("gate", "float32", [size]);
  const up = t.input("up", "float32", [size]);
  const [dGate, dUp] = gradients(t, [swigluSegment(t, gate, up)], [t.input("dy", "float32", [size])], [gate, up]);
  t.output(dGate!, "dGate");
  t.output(dUp!, "dUp");
  return t.encode();
}

// ---- rope on x [batch, seq, heads, headDim] with cos, sin tables [seq, 1, headDim] (positions from an
// offset, shared by the rows) or [batch, seq, 1, headDim] (every token's own position); the Mul broadcasts either.

/** The cos/sin table shape: [seq, 1, headDim], or [batch, seq, 1, headDim] per token. */
function ropeTableShape(dims: readonly [number, number, number, number], perToken: boolean): number[] {
  return perToken ? [dims[0], dims[1], 1, dims[3]] : [dims[1], 1, dims[3]];
}

/** y = x * cos + rotateHalf(x) * sin, rotateHalf([x1, x2]) = [-x2, x1] along the last axis. */
function ropeSegment(t: Tape, x: TapeValue, cos: TapeValue, sin: TapeValue): TapeValue {
  const half = x.dims[3]! / 2;
  const [x1, x2] = t.ops("Split", [x, t.int64s([half, half])], { axis: attr.int(3) });
  const rotated = t.op("Concat", [t.op("Neg", [x2!]), x1!], { axis: attr.int(3) });
  return t.op("Add", [t.op("Mul", [x, cos]), t.op("Mul", [rotated, sin])]);
}

export function ropeForwardGraph(dims: readonly [number, number, number, number], perToken = false): Uint8Array {
  const t = tape("rope_forward");
  const table = ropeTableShape(dims, perToken);
  t.output(ropeSegment(t, t.input("x", "float32", dims), t.input("cos", "float32", table), t.input("sin", "float32", table)), "y");
  return t.encode();
}

/** Derived: the same Split/Neg/Concat/Mul/Add count as forward (it is the rotation by minus the angle). */
export function ropeBackwardGraph(dims: readonly [number, number, number, number], perToken = false): Uint8Array {
  const t = tape("rope_backward");
  const table = ropeTableShape(dims, perToken);
  const x = t.placeholder("x", "float32", dims);
  const y = ropeSegment(t, x, t.input("cos", "float32", table), t.input("sin", "float32", table));
  const [dx] = gradients(t, [y], [t.input("dy", "float32", dims)], [x]);
  t.output(dx!, "dx");
  return t.encode();
}

// ---- embedding and cross-entropy (memory-bound; not differentiated by the registry)

/** out [rows, hidden] = table [vocab, hidden] gathered at ids int32 [rows]. */
export function embeddingForwardGraph(rows: number, vocab: number, hidden: number): Uint8Array {
  const t = tape("embedding_forward");
  t.output(t.op("Gather", [t.input("table", "float32", [vocab, hidden]), t.input("ids", "int32", [rows])], { axis: attr.int(0) }), "out");
  return t.encode();
}

/**
 * lse [rows] = max + log(sum(exp(logits - max))) per row. Composed from
 * ReduceMax, Sub, Exp, ReduceSum, Log, Add: measured 5x faster than
 * ONNX Runtime's ReduceLogSumExp on [2048, 4096] (the [rows, vocab]
 * intermediates stay in ONNX Runtime's arena).
 */
export function logSumExpGraph(rows: number, vocab: number): Uint8Array {
  const t = tape("cross_entropy_forward");
  const logits = t.input("logits", "float32", [rows, vocab]);
  const axes = t.int64s([1]);
  const keep = { keepdims: attr.int(1) };
  const max = t.op("ReduceMax", [logits, axes], keep);
  const sum = t.op("ReduceSum", [t.op("Exp", [t.op("Sub", [logits, max])]), axes], keep);
  // lse [rows, 1] -> [rows]
  t.output(t.op("Reshape", [t.op("Add", [t.op("Log", [sum]), max]), t.int64s([rows])]), "lse");
  return t.encode();
}

/** Hand-written: grad [rows, vocab] = softmax(logits) * rowScale [rows, 1]; the caller subtracts rowScale at each label. */
export function scaledSoftmaxGraph(rows: number, vocab: number): Uint8Array {
  const t = tape("cross_entropy_backward");
  const logits = t.input("logits", "float32", [rows, vocab]);
  const rowScale = t.input("rowScale", "float32", [rows, 1]);
  t.output(t.op("Mul", [t.op("Softmax", [logits], { axis: attr.int(-1) }), rowScale]), "grad");
  return t.encode();
}
