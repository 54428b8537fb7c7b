/**
 * Shape checks shared by the reference and the ONNX Runtime implementations of
 * the block's ops. Each check throws a KernelError naming the op and the
 * offending shapes; nothing here computes.
 */
import { formatShape, type Tensor } from "@ulysses/tensors";
import { KernelError } from "../errors.js";
import { ropeScalingProblem, type RopeScaling } from "./rope-scaling.js";
import type { RopePositions } from "./types.js";

/** Splits a shape [..., last] into rows = product of the leading axes and the last axis. */
export function rowsAndLast(op: string, name: string, t: Tensor): { rows: number; last: number } {
  if (t.rank < 1) throw new KernelError(`${op}: ${name} must have at least one axis, got ${t}`);
  const last = t.shape[t.rank - 1]!;
  return { rows: last === 0 ? 0 : t.size / last, last };
}

export function expectShape(op: string, name: string, t: Tensor, shape: readonly number[]): void {
  if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i])) {
    throw new KernelError(`${op}: ${name} must have shape ${formatShape(shape)}, got ${formatShape(t.shape)}`);
  }
}

export function expectSameShape(op: string, names: [string, string], a: Tensor, b: Tensor): void {
  expectShape(op, `${names[1]} (same shape as ${names[0]})`, b, a.shape);
}

export function expectSize(op: string, name: string, t: Tensor, size: number): void {
  if (t.size !== size) throw new KernelError(`${op}: ${name} must have ${size} elements, got ${t}`);
}

/** Checks a linear layer's operands; returns the flattened sizes. */
export function linearShapes(op: string, x: Tensor, w: Tensor, b?: Tensor): { rows: number; inF: number; outF: number } {
  const { rows, last: inF } = rowsAndLast(op, "x", x);
  if (w.rank !== 2 || w.shape[0] !== inF) {
    throw new KernelError(`${op}: w must be [in=${inF}, out] to match x ${formatShape(x.shape)}, got ${formatShape(w.shape)}`);
  }
  const outF = w.shape[1]!;
  if (b !== undefined) expectShape(op, "b", b, [outF]);
  return { rows, inF, outF };
}

/**
 * The shapes of one linear gradient alone: for the input's (`wrt` "x") w
 * [in, out] and dy [..., out]; for the weight's (`wrt` "w") x [..., in] and
 * dy [..., out] with as many rows.
 */
export function linearGradientShapes(op: string, operand: Tensor, dy: Tensor, wrt: "x" | "w"): { rows: number; inF: number; outF: number } {
  const { rows, last: outF } = rowsAndLast(op, "dy", dy);
  if (wrt === "x") {
    if (operand.rank !== 2 || operand.shape[1] !== outF) {
      throw new KernelError(`${op}: w must be [in, out=${outF}] to match dy ${formatShape(dy.shape)}, got ${formatShape(operand.shape)}`);
    }
    return { rows, inF: operand.shape[0]!, outF };
  }
  const { rows: xRows, last: inF } = rowsAndLast(op, "x", operand);
  if (xRows !== rows) throw new KernelError(`${op}: x ${formatShape(operand.shape)} and dy ${formatShape(dy.shape)} must have as many rows`);
  return { rows, inF, outF };
}

/**
 * Checks a rotary-embedding input [batch, seq, heads, headDim] with headDim
 * even, and its positions: an offset (a non-negative integer) or every
 * token's position, an Int32Array of batch * seq entries, none negative.
 */
export function ropeShape(op: string, x: Tensor, positions: RopePositions, base: number, scaling?: RopeScaling): [number, number, number, number] {
  if (x.rank !== 4 || x.shape[3]! % 2 !== 0) {
    throw new KernelError(`${op}: x must be [batch, seq, heads, headDim] with an even headDim, got ${formatShape(x.shape)}`);
  }
  const [batch, seq] = x.shape as [number, number];
  if (positions instanceof Int32Array) {
    if (positions.length !== batch * seq) {
      throw new KernelError(`${op}: positions must have batch * seq = ${batch} * ${seq} = ${batch * seq} entries (one per token), got ${positions.length}`);
    }
    for (let i = 0; i < positions.length; i++) {
      if (positions[i]! < 0)
        throw new KernelError(`${op}: positions[${i}] (row ${Math.floor(i / seq)}, token ${i % seq}) is ${positions[i]}; positions must be >= 0`);
    }
  } else if (typeof positions !== "number" || !Number.isInteger(positions) || positions < 0) {
    const shown = typeof positions === "number" ? positions : ArrayBuffer.isView(positions) ? `a ${(positions as object).constructor.name}` : typeof positions;
    throw new KernelError(`${op}: positions must be a non-negative integer offset or an Int32Array of batch * seq positions, got ${shown}`);
  }
  if (!(base > 0)) throw new KernelError(`${op}: base must be positive, got ${base}`);
  const problem = ropeScalingProblem(scaling, "scaling");
  if (problem !== undefined) throw new KernelError(`${op}: ${problem}`);
  return x.shape as [number, number, number, number];
}

/** Checks ids are int32 in [0, vocab). */
export function checkIds(op: string, ids: Tensor<"int32">, vocab: number): void {
  const data = ids.data;
  for (let i = 0; i < data.length; i++) {
    const id = data[i]!;
    if (id < 0 || id >= vocab) throw new KernelError(`${op}: id ${id} at position ${i} is outside the vocabulary [0, ${vocab})`);
  }
}

/** Checks labels [rows] are in [0, vocab) or equal to ignoreIndex; returns the number counted. */
export function checkLabels(op: string, labels: Tensor<"int32">, rows: number, vocab: number, ignoreIndex: number): number {
  if (labels.size !== rows) throw new KernelError(`${op}: labels must have ${rows} elements (one per logits row), got ${labels}`);
  let count = 0;
  const data = labels.data;
  for (let i = 0; i < rows; i++) {
    const label = data[i]!;
    if (label === ignoreIndex) continue;
    if (label < 0 || label >= vocab) {
      throw new KernelError(`${op}: label ${label} at row ${i} is outside [0, ${vocab}) and is not the ignore index ${ignoreIndex}`);
    }
    count++;
  }
  return count;
}
