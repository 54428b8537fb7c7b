/**
 * The ONNX graphs OrtAttention runs: forward once per (query block, batch,
 * kv head), backward once per (query block, batch, kv head, key tile). Each
 * is a handful of 2-D MatMuls of one block of query rows (the kv head's
 * whole query group) against the keys that block attends, holding one
 * [rows, keys] (forward) or [tile, rows] (backward) score matrix at a time,
 * never seq x seq. Scaling is left to the caller (queries
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
 * Backward (on S^T, per key tile): P^T = exp(S^T - lse), dv += P^T do,
 * dS^T = P^T * (v do^T - rowDot), dk += dS^T q, dqScaled += (dS^T)^T k.
 * dk/dv/dq accumulate through Gemm's C input.
 */
import { KernelError } from "../errors.js";
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

/**
 * The causal mask of the diagonal keys: tri [group * blockQueries, blockQueries]
 * is MASKED where key j > query r % blockQueries; `transposed` gives
 * tri^T [blockQueries, group * blockQueries] for the backward's S^T.
 */
function triangle(g: GraphBuilder, shape: BlockShape, transposed = false): Value {
  const { group, blockQueries: bq } = shape;
  const rows = group * bq;
  const values = new Float32Array(rows * bq);
  for (let r = 0; r < rows; r++) {
    for (let j = (r % bq) + 1; j < bq; j++) values[transposed ? j * rows + r : r * bq + j] = MASKED;
  }
  return g.constant(values, transposed ? [bq, rows] : [rows, bq], "float32", "causal_triangle");
}

/** Scores S [rows, keys] for the variant; declares the key inputs it needs. */
function scores(g: GraphBuilder, q: Value, shape: BlockShape): Value {
  const d = shape.headDim;
  const transB = { transB: attr.int(1) };
  if (shape.variant === "full") return g.op("Gemm", [q, g.input("k", "float32", ["keys", d])], transB, { name: "s" });
  const kd = g.input("kd", "float32", [shape.blockQueries, d]);
  const diagonal = g.op("Gemm", [q, kd, triangle(g, shape)], transB, { name: "s_diagonal" });
  if (shape.variant === "diagonalOnly") return diagonal;
  const kp = g.input("kp", "float32", ["prefix", d]);
  const prefix = g.op("Gemm", [q, kp], transB, { name: "s_prefix" });
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
 * Backward over one key tile: inputs q [rows, d] (scaled), k/v [tile, d],
 * dout [rows, d], lse [1, rows], rowdot [1, rows] (sum(dout * out) per query
 * row), dk_in/dv_in [tile, d], dq_in [rows, d]; outputs dk = dk_in + dS^T q,
 * dv = dv_in + P^T dout [tile, d], dq_scaled = dq_in + dS k [rows, d]. The
 * "diagonalOnly" variant is the causal diagonal tile (tile = blockQueries
 * keys, masked by tri^T); "full" tiles need no mask. It works on S^T
 * [tile, rows] (keys on rows), so dv and dk are plain MatMuls of the big
 * operand, which MLAS runs about 1.5x faster than transposed ones.
 */
export function buildBackwardGraph(shape: BlockShape): Uint8Array {
  if (shape.variant === "diagonal") throw new KernelError("backward graphs take whole tiles: use 'full' or 'diagonalOnly'");
  const d = shape.headDim;
  const tile = shape.variant === "full" ? "tile" : shape.blockQueries;
  const g = new GraphBuilder(blockGraphKey("backward", shape));
  const q = g.input("q", "float32", ["rows", d]);
  const k = g.input("k", "float32", [tile, d]);
  const v = g.input("v", "float32", [tile, d]);
  const dOut = g.input("dout", "float32", ["rows", d]);
  const lse = g.input("lse", "float32", [1, "rows"]);
  const rowDot = g.input("rowdot", "float32", [1, "rows"]);
  const dkIn = g.input("dk_in", "float32", [tile, d]);
  const dvIn = g.input("dv_in", "float32", [tile, d]);
  const dqIn = g.input("dq_in", "float32", ["rows", d]);
  // S^T - lse [tile, rows]: the shift (plus tri^T on the diagonal tile) rides on Gemm's C.
  const negLse = g.op("Neg", [lse]);
  const shift = shape.variant === "full" ? negLse : g.op("Add", [triangle(g, shape, true), negLse]);
  // P^T [tile, rows], recomputed from the forward's logSumExp.
  const pT = g.op("Exp", [g.op("Gemm", [k, q, shift], { transB: attr.int(1) }, { name: "st" })], {}, { name: "pt" });
  g.output(g.op("Gemm", [pT, dOut, dvIn]), "dv", "float32", [tile, d]);
  // (dP - rowDot)^T = v dout^T - rowDot [tile, rows], again through C.
  const dpT = g.op("Gemm", [v, dOut, g.op("Neg", [rowDot])], { transB: attr.int(1) }, { name: "dpt_centered" });
  const dsT = g.op("Mul", [pT, dpT], {}, { name: "dst" });
  g.output(g.op("Gemm", [dsT, q, dkIn]), "dk", "float32", [tile, d]);
  g.output(g.op("Gemm", [dsT, k, dqIn], { transA: attr.int(1) }), "dq_scaled", "float32", ["rows", d]);
  return g.encode();
}
