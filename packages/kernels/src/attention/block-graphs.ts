/**
 * The ONNX graphs OrtAttention runs once per (query block, batch, kv head):
 * 2-D MatMuls of one block of query rows (the kv head's whole query group)
 * against the keys that block attends. They hold one [rows, keys] score
 * matrix at a time, never seq x seq. Scaling is left to the caller (queries
 * arrive pre-scaled; dq leaves unscaled), so graphs do not depend on it.
 *
 * Variants:
 * - "full": no mask; S = q k^T over every key.
 * - "diagonal": causal; keys are fed as the unmasked prefix `kp` and the
 *   block's diagonal `kd` (its last `blockQueries` keys, views of the same
 *   memory); S = [q kp^T, q kd^T + tri] where tri is -1e30 above the diagonal.
 *   Fully masked keys are never fed, so they cost nothing.
 * - "diagonalOnly": causal with an empty prefix; S = q kd^T + tri.
 *
 * Forward: P = softmax(S), o = P v, logSumExp = max(S) - log(max(P)).
 * Backward: P = exp(S - lse), dv += P^T do, dS = P * (do v^T - rowDot),
 * dk += dS^T q, dqScaled = dS k. dk/dv accumulate through Gemm's C input.
 */
import { GraphBuilder, attr, type Value } from "../graph/builder.js";

export type BlockVariant = "full" | "diagonal" | "diagonalOnly";

/** Masked score added above the diagonal: finite so no row ever sees inf - inf. */
const MASKED = -1e30;

export interface BlockShape {
  variant: BlockVariant;
  headDim: number;
  /** Query heads per kv head (rows of a run = group * blockQueries). */
  group: number;
  /** Queries per block (only the diagonal variants depend on it). */
  blockQueries: number;
}

/** The session-cache key of a block graph. */
export function blockGraphKey(direction: "forward" | "backward", shape: BlockShape): string {
  const fixed = shape.variant === "full" ? "" : `:g${shape.group}:bq${shape.blockQueries}`;
  return `attention-${direction}:${shape.variant}:d${shape.headDim}${fixed}`;
}

/** tri [group * blockQueries, blockQueries]: MASKED where key column > the row's query position. */
function triangle(g: GraphBuilder, shape: BlockShape): Value {
  const { group, blockQueries: bq } = shape;
  const values = new Float32Array(group * bq * bq);
  for (let r = 0; r < group * bq; r++) {
    for (let c = (r % bq) + 1; c < bq; c++) values[r * bq + c] = MASKED;
  }
  return g.constant(values, [group * bq, bq], "float32", "causal_triangle");
}

/**
 * Scores S [rows, keys] for the variant, plus `shift` [rows, 1] when given
 * (added through Gemm's C input, which saves a pass over S); declares the key
 * inputs it needs.
 */
function scores(g: GraphBuilder, q: Value, shape: BlockShape, options: { whole?: Value; shift?: Value } = {}): Value {
  const d = shape.headDim;
  const transB = { transB: attr.int(1) };
  const { whole, shift } = options;
  const withShift = (c: Value | null): (Value | null)[] => (c === null ? (shift ? [shift] : []) : [shift ? g.op("Add", [c, shift]) : c]);
  if (shape.variant === "full") return g.op("Gemm", [q, whole ?? g.input("k", "float32", ["keys", d]), ...withShift(null)], transB, { name: "s" });
  const kd = g.input("kd", "float32", [shape.blockQueries, d]);
  // tri (+ shift) [rows, blockQueries]: small, so the Add costs nothing.
  const diagonal = g.op("Gemm", [q, kd, ...withShift(triangle(g, shape))], transB, { name: "s_diagonal" });
  if (shape.variant === "diagonalOnly") return diagonal;
  const kp = g.input("kp", "float32", ["prefix", d]);
  const prefix = g.op("Gemm", [q, kp, ...withShift(null)], transB, { name: "s_prefix" });
  // [rows, prefix] ++ [rows, blockQueries] -> [rows, keys]
  return g.op("Concat", [prefix, diagonal], { axis: attr.int(1) }, { name: "s" });
}

/** Forward: inputs q [rows, d] (scaled), keys, v [keys, d]; outputs o [rows, d], lse [rows]. */
export function buildForwardGraph(shape: BlockShape): Uint8Array {
  const d = shape.headDim;
  const g = new GraphBuilder(blockGraphKey("forward", shape));
  const q = g.input("q", "float32", ["rows", d]);
  const s = scores(g, q, shape);
  const v = g.input("v", "float32", ["keys", d]);
  const p = g.op("Softmax", [s], { axis: attr.int(-1) }, { name: "p" });
  g.output(g.op("MatMul", [p, v]), "o", "float32", ["rows", d]);
  // lse = m + log(sum exp(s - m)) and max(P) = exp(m - lse), so lse = m - log(max P).
  const reduce = { axes: attr.ints([-1]), keepdims: attr.int(0) };
  const m = g.op("ReduceMax", [s], reduce, { name: "row_max" });
  const pMax = g.op("ReduceMax", [p], reduce, { name: "p_max" });
  g.output(g.op("Sub", [m, g.op("Log", [pMax])]), "lse", "float32", ["rows"]);
  return g.encode();
}

/**
 * Backward: inputs q [rows, d] (scaled), k [keys, d] (plus kp/kd views for
 * the diagonal variants), v [keys, d], dout [rows, d], lse [rows, 1],
 * rowdot [rows, 1] (sum(dout * out) per row), dk_in/dv_in [keys, d];
 * outputs dq_scaled [rows, d], dk [keys, d] = dk_in + dS^T q, dv = dv_in + P^T dout.
 */
export function buildBackwardGraph(shape: BlockShape): Uint8Array {
  const d = shape.headDim;
  const g = new GraphBuilder(blockGraphKey("backward", shape));
  const q = g.input("q", "float32", ["rows", d]);
  const k = g.input("k", "float32", ["keys", d]);
  const lse = g.input("lse", "float32", ["rows", 1]);
  // S - lse [rows, keys]: the shift rides on Gemm's C input.
  const shifted = scores(g, q, shape, { whole: k, shift: g.op("Neg", [lse]) });
  const v = g.input("v", "float32", ["keys", d]);
  const dOut = g.input("dout", "float32", ["rows", d]);
  const rowDot = g.input("rowdot", "float32", ["rows", 1]);
  const dkIn = g.input("dk_in", "float32", ["keys", d]);
  const dvIn = g.input("dv_in", "float32", ["keys", d]);
  // P [rows, keys], recomputed from the forward's logSumExp.
  const p = g.op("Exp", [shifted], {}, { name: "p" });
  g.output(g.op("Gemm", [p, dOut, dvIn], { transA: attr.int(1) }), "dv", "float32", ["keys", d]);
  // dP - rowDot = dout v^T - rowDot [rows, keys], again through C.
  const dpCentered = g.op("Gemm", [dOut, v, g.op("Neg", [rowDot])], { transB: attr.int(1) }, { name: "dp_centered" });
  const ds = g.op("Mul", [p, dpCentered], {}, { name: "ds" });
  g.output(g.op("Gemm", [ds, q, dkIn], { transA: attr.int(1) }), "dk", "float32", ["keys", d]);
  g.output(g.op("MatMul", [ds, k]), "dq_scaled", "float32", ["rows", d]);
  return g.encode();
}
