/**
 * Layout operations the all-to-all needs: permute (any axis order), split and
 * chunk along an axis, concat, narrow. All produce contiguous row-major
 * results; `*Into` variants write into a caller-provided tensor so hot paths
 * allocate nothing. Round trips are exact (pure data movement).
 */
import { storageOverlaps, type DType, type Storage, type StorageByDType } from "./dtype.js";
import { TensorError } from "./errors.js";
import { formatShape, normalizeAxis, numel, stridesOf } from "./shape.js";
import { Tensor } from "./tensor.js";

type Writable = { set(v: ArrayLike<number> | ArrayLike<bigint>, offset?: number): void };
type Sliceable = { subarray(begin: number, end: number): ArrayLike<number> | ArrayLike<bigint> };

function checkAxes(axes: readonly number[], rank: number): number[] {
  const normalized = axes.map((a) => normalizeAxis(a, rank));
  const seen = new Set(normalized);
  if (normalized.length !== rank || seen.size !== rank) {
    throw new TensorError(`permute axes [${axes.join(", ")}] are not a permutation of 0..${rank - 1}`);
  }
  return normalized;
}

/** Shape of `shape` permuted by `axes` (out.shape[i] = shape[axes[i]]). */
export function permutedShape(shape: readonly number[], axes: readonly number[]): number[] {
  return checkAxes(axes, shape.length).map((a) => shape[a]!);
}

/** Writes `src` permuted by `axes` into `out` (out.shape[i] = src.shape[axes[i]]). */
export function permuteInto<D extends DType>(src: Tensor<D>, axes: readonly number[], out: Tensor<D>): Tensor<D> {
  const perm = checkAxes(axes, src.rank);
  const outShape = perm.map((a) => src.shape[a]!);
  if (out.dtype !== src.dtype || outShape.some((d, i) => d !== out.shape[i]) || out.rank !== outShape.length) {
    throw new TensorError(`permuteInto: output ${out} does not match ${src.dtype} ${formatShape(outShape)}`);
  }
  if (storageOverlaps(out.data, src.data)) throw new TensorError(`permuteInto: output ${out} shares memory with input ${src}`);
  if (src.size === 0) return out;
  const merged = coalesceAxes(src.shape, perm);
  copyPermuted(src.data, out.data, merged.shape, merged.axes);
  return out;
}

/**
 * The same data movement on fewer axes: drops size-1 axes and merges runs of
 * source axes that stay adjacent and in order in the output. For example
 * [b=1, N, H, D] permuted [2, 0, 1, 3] becomes [N, H, D] permuted [1, 0, 2],
 * and [P, n, h, D] permuted [1, 0, 2, 3] becomes [P, n, h*D] permuted [1, 0, 2].
 */
export function coalesceAxes(shape: readonly number[], axes: readonly number[]): { shape: number[]; axes: number[] } {
  const compact = new Map<number, number>();
  shape.forEach((d, a) => {
    if (d !== 1) compact.set(a, compact.size);
  });
  const dims = shape.filter((d) => d !== 1);
  const order = axes.filter((a) => shape[a] !== 1).map((a) => compact.get(a)!);
  const groups: { first: number; size: number }[] = [];
  order.forEach((a, i) => {
    if (i > 0 && a === order[i - 1]! + 1) groups[groups.length - 1]!.size *= dims[a]!;
    else groups.push({ first: a, size: dims[a]! });
  });
  const firsts = groups.map((g) => g.first).sort((x, y) => x - y);
  return {
    shape: firsts.map((f) => groups.find((g) => g.first === f)!.size),
    axes: groups.map((g) => firsts.indexOf(g.first)),
  };
}

/** Rows shorter than this are copied element by element: a subarray per row costs more. */
const MIN_SET_ROW = 16;

type Indexable = { [i: number]: number | bigint; length: number };

/** Copies `src` (contiguous, of `shape`) permuted by `axes` into `out`; axes are already coalesced. */
function copyPermuted(src: Storage, out: Storage, shape: readonly number[], axes: readonly number[]): void {
  const rank = shape.length;
  if (rank <= 1) {
    (out as unknown as Writable).set(src as ArrayLike<number>);
    return;
  }
  const srcStrides = stridesOf(shape);
  const outShape = axes.map((a) => shape[a]!);
  const steps = axes.map((a) => srcStrides[a]!); // source stride of each output axis
  // Each output row (last output axis) reads `rowLength` elements `rowStep` apart.
  const rowLength = outShape[rank - 1]!;
  const rowStep = steps[rank - 1]!;
  const outerDims = outShape.slice(0, rank - 1);
  const outerSteps = steps.slice(0, rank - 1);
  const outerRank = rank - 1;
  const index = new Array<number>(outerRank).fill(0);
  const size = out.length;
  const s = src as unknown as Indexable & Sliceable;
  const o = out as unknown as Indexable & Writable;
  const useSet = rowStep === 1 && rowLength >= MIN_SET_ROW;
  let srcOffset = 0;
  for (let dst = 0; dst < size; dst += rowLength) {
    if (useSet) {
      o.set(s.subarray(srcOffset, srcOffset + rowLength), dst);
    } else {
      for (let k = 0, from = srcOffset; k < rowLength; k++, from += rowStep) o[dst + k] = s[from]!;
    }
    // Odometer over the outer output axes.
    for (let d = outerRank - 1; d >= 0; d--) {
      index[d]!++;
      srcOffset += outerSteps[d]!;
      if (index[d]! < outerDims[d]!) break;
      srcOffset -= outerSteps[d]! * outerDims[d]!;
      index[d] = 0;
    }
  }
}

/** A new contiguous tensor: `src` with its axes reordered (out.shape[i] = src.shape[axes[i]]). */
export function permute<D extends DType>(src: Tensor<D>, axes: readonly number[]): Tensor<D> {
  return permuteInto(src, axes, new Tensor(src.dtype, permutedShape(src.shape, axes)));
}

/** Elements [start, start+length) along `axis`, as a new contiguous tensor. */
export function narrow<D extends DType>(src: Tensor<D>, axis: number, start: number, length: number): Tensor<D> {
  return narrowInto(src, axis, start, length, new Tensor(src.dtype, narrowedShape(src, axis, start, length)) as Tensor<D>);
}

/** src's shape with `length` on `axis`; throws a TensorError when [start, start + length) is outside the axis. */
function narrowedShape(src: Tensor, axis: number, start: number, length: number): number[] {
  const ax = normalizeAxis(axis, src.rank);
  const dim = src.shape[ax]!;
  if (!Number.isInteger(start) || !Number.isInteger(length) || start < 0 || length < 0 || start + length > dim) {
    throw new TensorError(`narrow: [${start}, ${start + length}) is outside axis ${ax} of size ${dim} (shape ${formatShape(src.shape)})`);
  }
  const shape = [...src.shape];
  shape[ax] = length;
  return shape;
}

/** Writes positions [start, start + length) of `axis` of `src` into `out` (src's shape with `length` on that axis). */
export function narrowInto<D extends DType>(src: Tensor<D>, axis: number, start: number, length: number, out: Tensor<D>): Tensor<D> {
  const ax = normalizeAxis(axis, src.rank);
  const shape = narrowedShape(src, ax, start, length);
  const dim = src.shape[ax]!;
  if (out.dtype !== src.dtype || out.rank !== shape.length || out.shape.some((d, i) => d !== shape[i])) {
    throw new TensorError(`narrowInto: output ${out} does not match ${src.dtype} ${formatShape(shape)}`);
  }
  if (storageOverlaps(out.data, src.data)) throw new TensorError(`narrowInto: output ${out} shares memory with input ${src}`);
  const outer = numel(src.shape.slice(0, ax));
  const inner = numel(src.shape.slice(ax + 1));
  const s = src.data as unknown as Sliceable;
  const o = out.data as unknown as Writable;
  const run = length * inner;
  for (let i = 0; i < outer; i++) {
    const from = (i * dim + start) * inner;
    o.set(s.subarray(from, from + run), i * run);
  }
  return out;
}

/** Splits along `axis` into pieces of the given sizes (which must add up to the axis length). */
export function split<D extends DType>(src: Tensor<D>, sizes: readonly number[], axis = 0): Tensor<D>[] {
  const ax = normalizeAxis(axis, src.rank);
  const dim = src.shape[ax]!;
  const total = sizes.reduce((a, b) => a + b, 0);
  if (sizes.some((s) => !Number.isInteger(s) || s < 0) || total !== dim) {
    throw new TensorError(`split sizes [${sizes.join(", ")}] (sum ${total}) do not add up to axis ${ax} of size ${dim} (shape ${formatShape(src.shape)})`);
  }
  const pieces: Tensor<D>[] = [];
  let start = 0;
  for (const s of sizes) {
    pieces.push(narrow(src, ax, start, s));
    start += s;
  }
  return pieces;
}

/**
 * Sizes of `count` near-equal parts of `length`: the first `length % count`
 * parts get one extra element (1000 over 3 -> 334, 333, 333).
 */
export function evenSplitSizes(length: number, count: number): number[] {
  if (!Number.isInteger(count) || count <= 0) throw new TensorError(`cannot split into ${count} parts`);
  if (!Number.isInteger(length) || length < 0) throw new TensorError(`cannot split a length of ${length}`);
  const base = Math.floor(length / count);
  const extra = length % count;
  return Array.from({ length: count }, (_, i) => base + (i < extra ? 1 : 0));
}

/** Splits along `axis` into `count` parts; equal when divisible, else as `evenSplitSizes`. */
export function chunk<D extends DType>(src: Tensor<D>, count: number, axis = 0): Tensor<D>[] {
  const ax = normalizeAxis(axis, src.rank);
  return split(src, evenSplitSizes(src.shape[ax]!, count), ax);
}

/** Writes `parts` joined along `axis` into `out`. */
export function concatInto<D extends DType>(parts: readonly Tensor<D>[], axis: number, out: Tensor<D>): Tensor<D> {
  if (parts.length === 0) throw new TensorError(`concatInto along axis ${axis}: got 0 tensors, need at least one`);
  const first = parts[0]!;
  const ax = normalizeAxis(axis, first.rank);
  let dim = 0;
  for (const p of parts) {
    const mismatch = p.dtype !== first.dtype || p.rank !== first.rank || p.shape.some((d, i) => i !== ax && d !== first.shape[i]);
    if (mismatch) {
      throw new TensorError(`concat along axis ${ax}: ${p} does not fit ${first} (all dims but the axis must match, same dtype)`);
    }
    dim += p.shape[ax]!;
  }
  const shape = [...first.shape];
  shape[ax] = dim;
  if (out.dtype !== first.dtype || out.rank !== shape.length || out.shape.some((d, i) => d !== shape[i])) {
    throw new TensorError(`concatInto: output ${out} does not match ${first.dtype} ${formatShape(shape)}`);
  }
  const aliased = parts.findIndex((p) => storageOverlaps(p.data, out.data));
  if (aliased !== -1) throw new TensorError(`concatInto: output ${out} shares memory with part ${aliased} (${parts[aliased]})`);
  const outer = numel(shape.slice(0, ax));
  const inner = numel(shape.slice(ax + 1));
  const o = out.data as unknown as Writable;
  let offset = 0;
  for (const p of parts) {
    const run = p.shape[ax]! * inner;
    const s = p.data as unknown as Sliceable;
    for (let i = 0; i < outer; i++) o.set(s.subarray(i * run, (i + 1) * run), i * dim * inner + offset);
    offset += run;
  }
  return out;
}

/** Joins `parts` along `axis` into a new tensor. */
export function concat<D extends DType>(parts: readonly Tensor<D>[], axis = 0): Tensor<D> {
  if (parts.length === 0) throw new TensorError(`concat along axis ${axis}: got 0 tensors, need at least one`);
  const first = parts[0]!;
  const ax = normalizeAxis(axis, first.rank);
  const shape = [...first.shape];
  shape[ax] = parts.reduce((a, p) => a + (p.shape[ax] ?? 0), 0);
  return concatInto(parts, ax, new Tensor(first.dtype, shape) as Tensor<D>);
}

export type { StorageByDType };
