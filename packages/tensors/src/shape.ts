/**
 * Shape arithmetic shared by every layout operation: validation, element
 * counts, row-major strides and axis normalisation.
 */
import { TensorError } from "./errors.js";

export type Shape = readonly number[];

export function formatShape(shape: Shape): string {
  return `[${shape.join(", ")}]`;
}

export function validateShape(shape: Shape): void {
  for (const d of shape) {
    if (!Number.isInteger(d) || d < 0) throw new TensorError(`invalid shape ${formatShape(shape)}: every dimension must be a non-negative integer`);
  }
}

export function numel(shape: Shape): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/** Row-major strides in elements. */
export function stridesOf(shape: Shape): number[] {
  const strides = new Array<number>(shape.length);
  let s = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i]!;
  }
  return strides;
}

/** Maps a possibly negative axis onto [0, rank). */
export function normalizeAxis(axis: number, rank: number): number {
  if (!Number.isInteger(axis) || axis < -rank || axis >= rank) {
    throw new TensorError(`axis ${axis} is out of range for a tensor of rank ${rank}`);
  }
  return axis < 0 ? axis + rank : axis;
}

/** Resolves one -1 in a reshape target against `size` elements. */
export function resolveReshape(from: Shape, to: Shape): number[] {
  const size = numel(from);
  const out = [...to];
  const unknown = out.indexOf(-1);
  if (out.indexOf(-1, unknown + 1) !== -1 && unknown !== -1) {
    throw new TensorError(`reshape ${formatShape(from)} -> ${formatShape(to)}: at most one dimension may be -1`);
  }
  if (unknown !== -1) {
    const known = numel(out.filter((_, i) => i !== unknown));
    if (known === 0 || size % known !== 0) {
      throw new TensorError(`reshape ${formatShape(from)} (${size} elements) -> ${formatShape(to)}: cannot infer the -1 dimension`);
    }
    out[unknown] = size / known;
  }
  validateShape(out);
  if (numel(out) !== size) {
    throw new TensorError(`reshape ${formatShape(from)} (${size} elements) -> ${formatShape(to)} (${numel(out)} elements): element counts differ`);
  }
  return out;
}
