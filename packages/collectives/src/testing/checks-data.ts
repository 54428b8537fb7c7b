/**
 * Conformance checks of the data-moving collectives: allToAll, allGather,
 * reduceScatter, allReduce and broadcast, in every dtype, with even and
 * uneven splits (zero-size chunks included), bare TypedArrays and
 * caller-provided outputs. Expected values come from the formulas in data.ts.
 */
import { Tensor } from "@ulysses/tensors";
import type { ProcessGroup, ReduceOp } from "../types.js";
import type { ConformanceCheck } from "./check.js";
import { DATA_DTYPES, REDUCE_DTYPES, expectData, expectTrue, fill, ranksOf, sum, value } from "./data.js";

/** Rows rank `src` sends to rank `dst` in the uneven checks (zeros included). */
export const unevenRows = (src: number, dst: number) => (src * 2 + dst * 3) % 4;

async function allToAllCase(group: ProcessGroup, rowsTo: (src: number, dst: number) => number, rowShape: number[], withOutput: boolean): Promise<void> {
  const P = group.size;
  const r = group.rank;
  const rowElements = rowShape.reduce((a, b) => a * b, 1);
  const rowsOf = (src: number) => sum(ranksOf(P).map((d) => rowsTo(src, d)));
  const inputOf = (src: number, i: number) => value(src, i);
  for (const dtype of DATA_DTYPES) {
    const input = fill(dtype, [rowsOf(r), ...rowShape], (i) => inputOf(r, i));
    const before = Array.from(input.data as ArrayLike<number | bigint>);
    const inputSplits = ranksOf(P).map((d) => rowsTo(r, d));
    const outputSplits = ranksOf(P).map((s) => rowsTo(s, r));
    const outRows = sum(outputSplits);
    const output = withOutput ? new Tensor(dtype, [outRows, ...rowShape]) : undefined;
    const out = await group.allToAll(input, { inputSplits, outputSplits, output });
    // expected: concat over src of src's rows [offset(src -> r), + rowsTo(src, r))
    const expected: number[] = [];
    for (let src = 0; src < P; src++) {
      const start = sum(ranksOf(r).map((d) => rowsTo(src, d))) * rowElements;
      for (let k = 0; k < rowsTo(src, r) * rowElements; k++) expected.push(inputOf(src, start + k));
    }
    expectData(`allToAll ${dtype} rank ${r}`, out, dtype, [outRows, ...rowShape], expected);
    if (output) expectTrue(out === output, `allToAll ${dtype}: the caller's output was not returned`);
    const after = Array.from(input.data as ArrayLike<number | bigint>);
    expectTrue(
      after.every((x, i) => x === before[i]),
      `allToAll ${dtype}: the input was modified`,
    );
  }
}

async function allToAllDefault(group: ProcessGroup): Promise<void> {
  // no splits: equal split of axis 0; a bare Float32Array is a 1-D tensor
  const P = group.size;
  const r = group.rank;
  const input = Float32Array.from({ length: 3 * P }, (_, i) => value(r, i));
  const out = await group.allToAll(input);
  const expected = ranksOf(P).flatMap((src) => [0, 1, 2].map((k) => value(src, r * 3 + k)));
  expectData(`allToAll bare rank ${r}`, out, "float32", [3 * P], expected);
}

async function allGatherCase(group: ProcessGroup, rowsOf: (r: number) => number, withSizes: boolean, withOutput: boolean): Promise<void> {
  const P = group.size;
  const r = group.rank;
  const rowShape = [2];
  for (const dtype of DATA_DTYPES) {
    const input = fill(dtype, [rowsOf(r), ...rowShape], (i) => value(r, i, 1));
    const sizes = ranksOf(P).map(rowsOf);
    const output = withOutput ? new Tensor(dtype, [sum(sizes), ...rowShape]) : undefined;
    const out = await group.allGather(input, { sizes: withSizes ? sizes : undefined, output });
    const expected = ranksOf(P).flatMap((src) => Array.from({ length: rowsOf(src) * 2 }, (_, i) => value(src, i, 1)));
    expectData(`allGather ${dtype} rank ${r}`, out, dtype, [sum(sizes), ...rowShape], expected);
    if (output) expectTrue(out === output, `allGather ${dtype}: the caller's output was not returned`);
  }
}

/** Logical inputs for reductions: a small base + 2r, so the mean over ranks is an integer and sums stay exact in bfloat16 up to 8 ranks. */
const reduceInput = (r: number, i: number) => ((i * 7 + 3) % 21) - 10 + 2 * r;

function reduceReference(op: ReduceOp, P: number, i: number): number {
  const xs = ranksOf(P).map((r) => reduceInput(r, i));
  if (op === "max") return Math.max(...xs);
  return op === "mean" ? sum(xs) / P : sum(xs);
}

const opsFor = (dtype: string): ReduceOp[] => (dtype.startsWith("int") ? ["sum", "max"] : ["sum", "mean", "max"]);

async function reduceScatterCase(group: ProcessGroup, sizesOf: (P: number) => number[] | undefined, withOutput: boolean): Promise<void> {
  const P = group.size;
  const r = group.rank;
  const sizes = sizesOf(P) ?? new Array<number>(P).fill(2);
  const rows = sum(sizes);
  for (const dtype of REDUCE_DTYPES) {
    for (const op of opsFor(dtype)) {
      const input = fill(dtype, [rows, 3], (i) => reduceInput(r, i));
      const output = withOutput ? new Tensor(dtype, [sizes[r]!, 3]) : undefined;
      const out = await group.reduceScatter(input, { op, sizes: sizesOf(P), output });
      const start = sum(sizes.slice(0, r)) * 3;
      const expected = Array.from({ length: sizes[r]! * 3 }, (_, k) => reduceReference(op, P, start + k));
      expectData(`reduceScatter ${op} ${dtype} rank ${r}`, out, dtype, [sizes[r]!, 3], expected);
      if (output) expectTrue(out === output, `reduceScatter: the caller's output was not returned`);
    }
  }
}

async function allReduceCase(group: ProcessGroup, numel: number): Promise<void> {
  const P = group.size;
  const r = group.rank;
  for (const dtype of REDUCE_DTYPES) {
    for (const op of opsFor(dtype)) {
      const t = fill(dtype, [numel], (i) => reduceInput(r, i));
      const out = await group.allReduce(t, { op });
      expectTrue(out === t, `allReduce ${dtype}: did not resolve with the same tensor`);
      expectData(
        `allReduce ${op} ${dtype} numel ${numel} rank ${r}`,
        t,
        dtype,
        [numel],
        Array.from({ length: numel }, (_, i) => reduceReference(op, P, i)),
      );
    }
  }
}

async function broadcastCase(group: ProcessGroup): Promise<void> {
  const P = group.size;
  const r = group.rank;
  for (let root = 0; root < P; root++) {
    for (const dtype of DATA_DTYPES) {
      const t = fill(dtype, [3, 2], (i) => value(r, i, 3));
      await group.broadcast(t, { root });
      expectData(
        `broadcast ${dtype} root ${root} rank ${r}`,
        t,
        dtype,
        [3, 2],
        Array.from({ length: 6 }, (_, i) => value(root, i, 3)),
      );
    }
  }
}

export const DATA_CHECKS: readonly ConformanceCheck[] = [
  { name: "allToAll/even", run: (g) => allToAllCase(g, () => 2, [3], false) },
  { name: "allToAll/uneven-with-zero-chunks", run: (g) => allToAllCase(g, unevenRows, [2, 2], false) },
  { name: "allToAll/caller-output", run: (g) => allToAllCase(g, unevenRows, [3], true) },
  { name: "allToAll/bare-typed-array-default-splits", run: allToAllDefault },
  { name: "allGather/even", run: (g) => allGatherCase(g, () => 2, false, false) },
  { name: "allGather/uneven-sizes", run: (g) => allGatherCase(g, (r) => r % 3, true, false) },
  { name: "allGather/caller-output", run: (g) => allGatherCase(g, (r) => (r + 1) % 2, true, true) },
  { name: "reduceScatter/even", run: (g) => reduceScatterCase(g, () => undefined, false) },
  { name: "reduceScatter/uneven-sizes", run: (g) => reduceScatterCase(g, (P) => ranksOf(P).map((r) => (r * 2 + 1) % 3), true) },
  { name: "allReduce/all-dtypes", run: (g) => allReduceCase(g, 10) },
  { name: "allReduce/fewer-elements-than-ranks", run: (g) => allReduceCase(g, 1) },
  { name: "allReduce/empty", run: (g) => allReduceCase(g, 0) },
  { name: "broadcast/every-root", run: broadcastCase },
];
