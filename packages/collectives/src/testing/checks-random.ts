/**
 * A randomized differential check: seeded random calls (op, dtype, row shape,
 * uneven splits with zeros, reduce op) run on the backend under test and, in
 * this thread, on the local reference backend with every rank's input (each
 * rank can build them all from the seed); every rank's output must be equal
 * element for element. Values are small integers, so any summation order
 * gives the same result.
 */
import { Rng, type Tensor, type DType } from "@ulysses/tensors";
import { createLocalGroups } from "../local/local-group.js";
import type { ProcessGroup, ReduceOp } from "../types.js";
import type { ConformanceCheck } from "./check.js";
import { DATA_DTYPES, REDUCE_DTYPES, fill, ranksOf, sum } from "./data.js";

type Op = "allToAll" | "allGather" | "reduceScatter" | "allReduce" | "broadcast";
const OPS: Op[] = ["allToAll", "allGather", "reduceScatter", "allReduce", "broadcast"];

interface Case {
  op: Op;
  dtype: DType;
  reduceOp: ReduceOp;
  rowShape: number[];
  /** allToAll: splits[src][dst]; others: splits[0] = per-rank rows (allGather, reduceScatter) */
  splits: number[][];
  numel: number;
  root: number;
  /** rank r's input */
  input(r: number): Tensor;
}

function makeCase(seed: number, P: number): Case {
  // The tensors package's Philox stream: the same cases on every rank.
  const rng = new Rng(seed, P);
  const rand = (n: number) => rng.int(n);
  const op = OPS[rand(OPS.length)]!;
  const reducing = op === "reduceScatter" || op === "allReduce";
  const dtypes = reducing ? REDUCE_DTYPES : DATA_DTYPES;
  const dtype = dtypes[rand(dtypes.length)]!;
  const ops: ReduceOp[] = dtype.startsWith("int") ? ["sum", "max"] : ["sum", "mean", "max"];
  const reduceOp = ops[rand(ops.length)]!;
  const rowShape = Array.from({ length: rand(3) }, () => 1 + rand(3));
  const splits = ranksOf(P).map(() => ranksOf(P).map(() => rand(4)));
  const numel = rand(14);
  const root = rand(P);
  // mean over P must be exact: inputs are multiples of P in that case
  const scale = reduceOp === "mean" && reducing ? P : 1;
  const valueAt = (r: number, i: number) => ((((seed + 1) * 31 + r * 17 + i * 13) % 21) - 10) * scale;
  const shapeOf = (r: number): number[] => {
    switch (op) {
      case "allToAll":
        return [sum(splits[r]!), ...rowShape];
      case "allGather":
        return [splits[0]![r]!, ...rowShape];
      case "reduceScatter":
        return [sum(splits[0]!), ...rowShape];
      default:
        return [numel];
    }
  };
  return { op, dtype, reduceOp, rowShape, splits, numel, root, input: (r) => fill(dtype, shapeOf(r), (i) => valueAt(r, i)) };
}

function call(g: ProcessGroup, c: Case, input: Tensor): Promise<Tensor> {
  const P = g.size;
  switch (c.op) {
    case "allToAll":
      return g.allToAll(input, { inputSplits: c.splits[g.rank], outputSplits: ranksOf(P).map((s) => c.splits[s]![g.rank]!) });
    case "allGather":
      return g.allGather(input, { sizes: c.splits[0] });
    case "reduceScatter":
      return g.reduceScatter(input, { op: c.reduceOp, sizes: c.splits[0] });
    case "allReduce":
      return g.allReduce(input, { op: c.reduceOp });
    case "broadcast":
      return g.broadcast(input, { root: c.root });
  }
}

async function randomAgainstLocal(group: ProcessGroup): Promise<void> {
  const P = group.size;
  for (let seed = 0; seed < 24; seed++) {
    const c = makeCase(seed, P);
    const got = await call(group, c, c.input(group.rank));
    const reference = createLocalGroups(P);
    const expected = (await Promise.all(reference.map((g, r) => call(g, c, c.input(r)))))[group.rank]!;
    const describe = `case ${seed}: ${c.op} ${c.dtype} ${c.reduceOp} rows [${c.rowShape.join(", ")}] splits ${JSON.stringify(c.op === "allToAll" ? c.splits : c.splits[0])} on rank ${group.rank}`;
    if (got.shape.join(",") !== expected.shape.join(","))
      throw new Error(`${describe}: shape [${got.shape.join(", ")}], reference [${expected.shape.join(", ")}]`);
    const a = got.data as ArrayLike<number | bigint>;
    const b = expected.data as ArrayLike<number | bigint>;
    for (let i = 0; i < b.length; i++) if (a[i] !== b[i]) throw new Error(`${describe}: element ${i} is ${String(a[i])}, reference ${String(b[i])}`);
  }
}

export const RANDOM_CHECKS: readonly ConformanceCheck[] = [{ name: "random/against-local-reference", run: randomAgainstLocal }];
