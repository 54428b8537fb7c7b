// Property-based tests of the layout operations: round trips are identities,
// and results agree with a naive multi-index reference written here.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Tensor, chunk, concat, narrow, narrowInto, permute, split, type DType } from "@ulysses/tensors";

const arbShape = fc.array(fc.integer({ min: 0, max: 4 }), { minLength: 1, maxLength: 5 });
const arbPositiveShape = fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 1, maxLength: 5 });
const arbDType = fc.constantFrom<DType>("float32", "float64", "float16", "int32", "int64", "uint8");

/** A tensor whose element i holds i (wrapped for small types): every position is recognisable. */
function indexed(dtype: DType, shape: readonly number[]): Tensor {
  const t = new Tensor(dtype, shape);
  const d = t.data as unknown as { [i: number]: number | bigint; length: number };
  for (let i = 0; i < d.length; i++) d[i] = dtype === "int64" ? BigInt(i) : dtype === "uint8" ? i % 256 : i;
  return t;
}

/** Naive reference: out[idx] = src[idx permuted back], one multi-index at a time. */
function referencePermute(values: ArrayLike<unknown>, shape: readonly number[], axes: readonly number[]): unknown[] {
  const outShape = axes.map((a) => shape[a]!);
  const size = outShape.reduce((a, b) => a * b, 1);
  const out: unknown[] = [];
  for (let flat = 0; flat < size; flat++) {
    const outIndex = new Array<number>(outShape.length);
    let rest = flat;
    for (let d = outShape.length - 1; d >= 0; d--) {
      outIndex[d] = rest % outShape[d]!;
      rest = Math.floor(rest / outShape[d]!);
    }
    const srcIndex = new Array<number>(shape.length);
    axes.forEach((a, i) => (srcIndex[a] = outIndex[i]!));
    let offset = 0;
    for (let d = 0; d < shape.length; d++) offset = offset * shape[d]! + srcIndex[d]!;
    out.push(values[offset]);
  }
  return out;
}

const shapeAndAxes = arbShape.chain((shape) =>
  fc.tuple(fc.constant(shape), fc.shuffledSubarray([...shape.keys()], { minLength: shape.length, maxLength: shape.length })),
);

/** Sizes adding up to `total`, some of them zero. */
function arbSizes(total: number): fc.Arbitrary<number[]> {
  return fc.array(fc.integer({ min: 0, max: total }), { minLength: 0, maxLength: 4 }).map((cuts) => {
    const points = [0, ...cuts.sort((a, b) => a - b), total];
    return points.slice(1).map((p, i) => p - points[i]!);
  });
}

const shapeAxisSizes = arbShape.chain((shape) =>
  fc.integer({ min: 0, max: shape.length - 1 }).chain((axis) => fc.tuple(fc.constant(shape), fc.constant(axis), arbSizes(shape[axis]!))),
);

describe("layout properties", () => {
  it("permute matches the naive reference and the inverse permutation restores the input", () => {
    fc.assert(
      fc.property(shapeAndAxes, arbDType, ([shape, axes], dtype) => {
        const t = indexed(dtype, shape);
        const p = permute(t, axes);
        expect(p.shape).toEqual(axes.map((a) => shape[a]));
        expect(Array.from(p.data as ArrayLike<unknown>)).toEqual(referencePermute(t.data as ArrayLike<unknown>, shape, axes));
        const inverse = new Array<number>(axes.length);
        axes.forEach((a, i) => (inverse[a] = i));
        const back = permute(p, inverse);
        expect(back.shape).toEqual(shape);
        expect(back.data).toEqual(t.data);
      }),
      { numRuns: 300 },
    );
  });

  it("negative axes name the same permutation", () => {
    fc.assert(
      fc.property(shapeAndAxes, ([shape, axes]) => {
        const t = indexed("float32", shape);
        const negative = axes.map((a) => a - shape.length);
        expect(permute(t, negative).data).toEqual(permute(t, axes).data);
      }),
    );
  });

  it("split with given sizes, then concat, is the identity on any axis", () => {
    fc.assert(
      fc.property(shapeAxisSizes, arbDType, ([shape, axis, sizes], dtype) => {
        const t = indexed(dtype, shape);
        const parts = split(t, sizes, axis);
        expect(parts.map((p) => p.shape[axis])).toEqual(sizes);
        parts.forEach((p) => expect(p.shape.filter((_, i) => i !== axis)).toEqual(shape.filter((_, i) => i !== axis)));
        const joined = concat(parts, axis);
        expect(joined.shape).toEqual(shape);
        expect(joined.data).toEqual(t.data);
      }),
      { numRuns: 300 },
    );
  });

  it("split pieces equal narrow, and narrow and narrowInto match a naive slice", () => {
    fc.assert(
      fc.property(shapeAxisSizes, ([shape, axis, sizes]) => {
        const t = indexed("float32", shape);
        let start = 0;
        for (const piece of split(t, sizes, axis - shape.length)) {
          const expected: number[] = [];
          const outer = shape.slice(0, axis).reduce((a, b) => a * b, 1);
          const inner = shape.slice(axis + 1).reduce((a, b) => a * b, 1);
          for (let o = 0; o < outer; o++) {
            for (let j = start; j < start + piece.shape[axis]!; j++) {
              for (let k = 0; k < inner; k++) expected.push((o * shape[axis]! + j) * inner + k);
            }
          }
          expect(Array.from(piece.data as Float32Array)).toEqual(expected);
          expect(narrow(t, axis, start, piece.shape[axis]!).data).toEqual(piece.data);
          // into a caller's buffer (a view with elements on either side, left untouched)
          const buffer = new Float32Array(piece.size + 3).fill(-1);
          const into = new Tensor("float32", piece.shape, buffer.subarray(2, 2 + piece.size));
          expect(narrowInto(t, axis, start, piece.shape[axis]!, into)).toBe(into);
          expect(Array.from(into.data)).toEqual(expected);
          expect([buffer[0], buffer[1], buffer[piece.size + 2]]).toEqual([-1, -1, -1]);
          start += piece.shape[axis]!;
        }
      }),
    );
  });

  it("chunk into equal or near-equal parts, then concat, is the identity", () => {
    fc.assert(
      fc.property(arbPositiveShape, fc.integer({ min: 1, max: 6 }), fc.nat(), (shape, count, axisSeed) => {
        const axis = axisSeed % shape.length;
        const t = indexed("float32", shape);
        const parts = chunk(t, count, axis);
        expect(parts).toHaveLength(count);
        const sizes = parts.map((p) => p.shape[axis]!);
        expect(Math.max(...sizes) - Math.min(...sizes)).toBeLessThanOrEqual(1);
        expect(sizes).toEqual([...sizes].sort((a, b) => b - a)); // larger parts first
        expect(concat(parts, axis).data).toEqual(t.data);
      }),
      { numRuns: 300 },
    );
  });

  it("the all-to-all layout: [b, N/P, H, D] -> per-rank head groups -> back", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 4 }), fc.integer({ min: 1, max: 4 }), fc.constantFrom(1, 3, 16, 33), arbDType, (ranks, headsPerRank, d, dtype) => {
        const shape = [2, 3, ranks * headsPerRank, d]; // [b, N/P, H, D]
        const t = indexed(dtype, shape);
        const parts = chunk(t, ranks, 2); // P x [b, N/P, H/P, D]
        const sent = parts.map((p) => permute(p, [2, 0, 1, 3])); // [H/P, b, N/P, D]
        sent.forEach((p, i) =>
          expect(Array.from(p.data as ArrayLike<unknown>)).toEqual(referencePermute(parts[i]!.data as ArrayLike<unknown>, parts[i]!.shape, [2, 0, 1, 3])),
        );
        const received = sent.map((p) => permute(p, [1, 2, 0, 3])); // back to [b, N/P, H/P, D]
        expect(concat(received, 2).data).toEqual(t.data);
      }),
    );
  });
});
