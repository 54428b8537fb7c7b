/**
 * The catalogue of bad collective calls the conformance suite makes: for
 * every data operation, inputs and options that are wrong on one rank (rank
 * 1) or on every rank, each with the words its rejection must contain.
 */
import { Tensor, type DType } from "@ulysses/tensors";
import type { ProcessGroup } from "../types.js";
import { fill, value } from "./data.js";

/** The rank that makes the bad call in the one-rank cases. */
const BAD = 1;

/** One bad collective call: `bad` runs on every rank (arguments may depend on the rank). */
export interface BadCall {
  name: string;
  bad(g: ProcessGroup): unknown;
  /** Words the message must contain. */
  mentions(P: number): string[];
}

type DataOp = "allToAll" | "allGather" | "reduceScatter" | "allReduce" | "broadcast";
const DATA_OPS: readonly DataOp[] = ["allToAll", "allGather", "reduceScatter", "allReduce", "broadcast"];

/** A valid input of `op` for a group of P: row-split ops get 2P rows of 3 (allGather 2 rows), the rest 6 elements. */
function goodShape(op: DataOp, P: number, cols = 3): number[] {
  if (op === "allToAll" || op === "reduceScatter") return [2 * P, cols];
  if (op === "allGather") return [2, cols];
  return [2 * cols];
}

function goodInput(op: DataOp, P: number, dtype: DType = "float32", cols = 3): Tensor {
  return fill(dtype, goodShape(op, P, cols), (i) => value(0, i));
}

/** Calls `op`; broadcast gets root 0 unless the options say otherwise. */
function callOp(g: ProcessGroup, op: DataOp, input: unknown, options?: unknown): Promise<unknown> {
  const anyGroup = g as unknown as Record<DataOp, (input: unknown, options?: unknown) => Promise<unknown>>;
  if (op === "broadcast" && options === undefined) return g.broadcast(input as Tensor, { root: 0 });
  return anyGroup[op].call(g, input, options);
}

/** Rank BAD passes `badArg`, the others a good input. */
const oneRank = (op: DataOp, badInput: (P: number) => unknown, options?: (g: ProcessGroup) => unknown) => (g: ProcessGroup) =>
  callOp(g, op, g.rank === BAD ? badInput(g.size) : goodInput(op, g.size), options?.(g));

/** Rank BAD passes `badOptions`, the others `goodOptions` (default none; broadcast root 0). */
const oneRankOptions = (op: DataOp, badOptions: (P: number) => unknown, goodOptions?: (P: number) => unknown) => (g: ProcessGroup) =>
  callOp(g, op, goodInput(op, g.size), g.rank === BAD ? badOptions(g.size) : goodOptions?.(g.size));

/** The default split of the good inputs: 2 rows per rank. */
const twos = (P: number) => new Array<number>(P).fill(2);

const COMMON: BadCall[] = DATA_OPS.flatMap((op): BadCall[] => [
  { name: `errors/${op}/not-a-tensor`, bad: oneRank(op, () => ({ shape: [2] })), mentions: () => [op, "rank 1", "Tensor"] },
  { name: `errors/${op}/unsupported-typed-array`, bad: oneRank(op, () => new Int16Array(6)), mentions: () => ["rank 1", "Int16Array"] },
  {
    name: `errors/${op}/dtype-differs`,
    bad: (g) => callOp(g, op, goodInput(op, g.size, g.rank === BAD ? "float64" : "float32")),
    mentions: () => ["float32", "float64"],
  },
  {
    name: `errors/${op}/shape-differs`,
    bad: (g) => callOp(g, op, goodInput(op, g.size, "float32", g.rank === BAD ? 4 : 3)),
    mentions: (P) => ["rank 1", `[${goodShape(op, P, 4).join(", ")}]`],
  },
  { name: `errors/${op}/options-not-an-object`, bad: oneRankOptions(op, () => 5), mentions: () => ["rank 1", "options"] },
]);

/** Splits on rank BAD for the row-split ops (allToAll inputSplits, allGather and reduceScatter sizes). */
function splitCases(op: "allToAll" | "allGather" | "reduceScatter", key: string): BadCall[] {
  const bad = (splits: (P: number) => unknown) =>
    oneRankOptions(
      op,
      (P) => ({ [key]: splits(P) }),
      (P) => ({ [key]: twos(P) }),
    );
  return [
    { name: `errors/${op}/${key}-not-an-array`, bad: bad(() => 4), mentions: () => ["rank 1", key, "array"] },
    { name: `errors/${op}/${key}-wrong-length`, bad: bad((P) => new Array<number>(P + 1).fill(1)), mentions: (P) => ["rank 1", key, `${P + 1}`] },
    {
      name: `errors/${op}/${key}-negative`,
      bad: bad((P) => [-1, ...new Array<number>(P - 2).fill(2), op === "allGather" ? 2 : 5]),
      mentions: () => ["rank 1", key, "-1"],
    },
    {
      name: `errors/${op}/${key}-fractional`,
      bad: bad((P) => [1.5, ...new Array<number>(P - 2).fill(2), op === "allGather" ? 2 : 2.5]),
      mentions: () => ["rank 1", key, "1.5"],
    },
    { name: `errors/${op}/${key}-not-numbers`, bad: bad((P) => new Array<unknown>(P).fill("2")), mentions: () => ["rank 1", key] },
  ];
}

const SPECIFIC: BadCall[] = [
  ...splitCases("allToAll", "inputSplits"),
  ...splitCases("allToAll", "outputSplits"),
  ...splitCases("allGather", "sizes"),
  ...splitCases("reduceScatter", "sizes"),
  {
    name: "errors/allToAll/inputSplits-wrong-sum",
    bad: oneRankOptions("allToAll", (P) => ({ inputSplits: [3, ...new Array<number>(P - 1).fill(2)] })),
    mentions: (P) => ["rank 1", `${2 * P + 1}`, `${2 * P}`],
  },
  {
    name: "errors/allToAll/outputSplits-wrong-sum-for-output",
    bad: (g) =>
      g.allToAll(goodInput("allToAll", g.size), {
        outputSplits: twos(g.size),
        output: new Tensor("float32", [g.rank === BAD ? 2 * g.size + 1 : 2 * g.size, 3]),
      }),
    mentions: (P) => ["rank 1", `${2 * P}`, `${2 * P + 1}`],
  },
  {
    name: "errors/allToAll/outputSplits-do-not-pair-with-inputSplits",
    bad: (g) => g.allToAll(goodInput("allToAll", g.size), { outputSplits: g.rank === BAD ? [1, 3, ...new Array<number>(g.size - 2).fill(2)] : undefined }),
    mentions: () => ["rank 1", "rank 0"],
  },
  {
    name: "errors/allToAll/rows-not-divisible-without-splits",
    bad: oneRank("allToAll", (P) => new Tensor("float32", [2 * P + 1, 3])),
    mentions: (P) => ["rank 1", `${2 * P + 1}`],
  },
  { name: "errors/allToAll/output-not-a-tensor", bad: oneRankOptions("allToAll", () => ({ output: [1, 2] })), mentions: () => ["rank 1", "output"] },
  {
    name: "errors/allToAll/output-wrong-dtype",
    bad: oneRankOptions("allToAll", (P) => ({ output: new Tensor("float64", [2 * P, 3]) })),
    mentions: () => ["rank 1", "float64"],
  },
  { name: "errors/allToAll/scalar-input", bad: oneRank("allToAll", () => new Tensor("float32", [])), mentions: () => ["rank 1", "axis"] },
  {
    name: "errors/allGather/sizes-do-not-match-the-rows",
    bad: oneRankOptions(
      "allGather",
      (P) => ({ sizes: [3, ...new Array<number>(P - 1).fill(2)] }),
      (P) => ({ sizes: twos(P) }),
    ),
    mentions: () => ["rank 1", "sizes"],
  },
  {
    name: "errors/allGather/uneven-rows-without-sizes",
    bad: oneRank("allGather", () => new Tensor("float32", [3, 3])),
    mentions: () => ["sizes"],
  },
  {
    name: "errors/reduceScatter/sizes-wrong-sum",
    bad: oneRankOptions("reduceScatter", (P) => ({ sizes: [3, ...new Array<number>(P - 1).fill(2)] })),
    mentions: (P) => ["rank 1", `${2 * P + 1}`, `${2 * P}`],
  },
  {
    name: "errors/reduceScatter/sizes-differ-between-ranks",
    bad: (g) => g.reduceScatter(goodInput("reduceScatter", g.size), { sizes: g.rank === BAD ? [1, 3, ...new Array<number>(g.size - 2).fill(2)] : undefined }),
    mentions: () => ["sizes", "rank 1"],
  },
  {
    name: "errors/reduceScatter/rows-not-divisible-without-sizes",
    bad: (g) => g.reduceScatter(new Tensor("float32", [2 * g.size + 1, 3])),
    mentions: (P) => [`${2 * P + 1}`, "sizes"],
  },
  { name: "errors/reduceScatter/unknown-op", bad: oneRankOptions("reduceScatter", () => ({ op: "prod" })), mentions: () => ["rank 1", "prod"] },
  { name: "errors/reduceScatter/op-differs", bad: oneRankOptions("reduceScatter", () => ({ op: "max" })), mentions: () => ["sum", "max"] },
  { name: "errors/allReduce/unknown-op", bad: oneRankOptions("allReduce", () => ({ op: "min" })), mentions: () => ["rank 1", "min"] },
  { name: "errors/allReduce/op-not-a-string", bad: oneRankOptions("allReduce", () => ({ op: 1 })), mentions: () => ["rank 1", "reduce op"] },
  { name: "errors/allReduce/op-differs", bad: oneRankOptions("allReduce", () => ({ op: "mean" })), mentions: () => ["sum", "mean"] },
  { name: "errors/allReduce/mean-of-integers", bad: (g) => g.allReduce(new Int32Array(4), { op: "mean" }), mentions: () => ["mean", "int32"] },
  {
    name: "errors/broadcast/root-out-of-range",
    bad: (g) => g.broadcast(goodInput("broadcast", g.size), { root: g.rank === BAD ? g.size : 0 }),
    mentions: (P) => ["rank 1", `root ${P}`],
  },
  {
    name: "errors/broadcast/root-negative",
    bad: (g) => g.broadcast(goodInput("broadcast", g.size), { root: g.rank === BAD ? -1 : 0 }),
    mentions: () => ["rank 1", "root -1"],
  },
  {
    name: "errors/broadcast/root-fractional",
    bad: (g) => g.broadcast(goodInput("broadcast", g.size), { root: g.rank === BAD ? 0.5 : 0 }),
    mentions: () => ["rank 1", "root 0.5"],
  },
  {
    name: "errors/broadcast/root-NaN",
    bad: (g) => g.broadcast(goodInput("broadcast", g.size), { root: g.rank === BAD ? Number.NaN : 0 }),
    mentions: () => ["rank 1", "root NaN"],
  },
  {
    name: "errors/broadcast/root-not-a-number",
    bad: (g) => g.broadcast(goodInput("broadcast", g.size), { root: (g.rank === BAD ? "0" : 0) as number }),
    mentions: () => ["rank 1", "root"],
  },
  {
    name: "errors/broadcast/root-missing",
    bad: (g) => g.broadcast(goodInput("broadcast", g.size), (g.rank === BAD ? {} : { root: 0 }) as { root: number }),
    mentions: () => ["rank 1", "root"],
  },
  {
    name: "errors/broadcast/root-differs",
    bad: (g) => g.broadcast(goodInput("broadcast", g.size), { root: g.rank === BAD ? 1 : 0 }),
    mentions: () => ["root", "rank 1"],
  },
  {
    name: "errors/barrier/operation-differs",
    bad: (g) => (g.rank === BAD ? g.barrier() : g.broadcast(goodInput("broadcast", g.size), { root: 0 })),
    mentions: () => ["barrier", "broadcast"],
  },
  {
    name: "errors/newGroup/ranks-not-an-array",
    bad: (g) => g.newGroup((g.rank === BAD ? "0,1" : [0, 1]) as unknown as number[]),
    mentions: () => ["rank 1", "ranks"],
  },
  { name: "errors/newGroup/ranks-duplicated", bad: (g) => g.newGroup(g.rank === BAD ? [0, 0] : [0, 1]), mentions: () => ["rank 1", "[0, 0]"] },
  { name: "errors/newGroup/ranks-out-of-range", bad: (g) => g.newGroup(g.rank === BAD ? [0, g.size] : [0, 1]), mentions: (P) => ["rank 1", `[0, ${P}]`] },
  { name: "errors/newGroup/ranks-fractional", bad: (g) => g.newGroup(g.rank === BAD ? [0, 0.5] : [0, 1]), mentions: () => ["rank 1", "0.5"] },
  { name: "errors/newGroup/ranks-empty", bad: (g) => g.newGroup(g.rank === BAD ? [] : [0, 1]), mentions: () => ["rank 1", "[]"] },
  { name: "errors/newGroup/ranks-differ-between-ranks", bad: (g) => g.newGroup(g.rank === BAD ? [1, 0] : [0, 1]), mentions: () => ["[0, 1]", "[1, 0]"] },
];

/** Every bad collective call of the suite (exported for reports and tools). */
export const BAD_COLLECTIVE_CALLS: readonly BadCall[] = [...COMMON, ...SPECIFIC];
