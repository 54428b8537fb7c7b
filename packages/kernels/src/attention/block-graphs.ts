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
 * - "masked": packed documents, where a block's queries attend different key
 *   ranges; S = q k^T + bias, with bias [blockQueries, keys] (0 or MASKED,
 *   built by the caller from the key ranges) broadcast over the query group
 *   (S seen as [group, blockQueries, keys]). Keys are the span the block's
 *   queries attend, so keys outside it cost nothing here either.
 *
 * Forward: P = softmax(S), o = P v, logSumExp = max(S) - log(max(P)).
 * Backward (on S^T, per key tile): P^T = exp(S^T - lse), dv += P^T do,
 * dS^T = P^T * (v do^T - rowDot), dk += dS^T q, dqScaled += (dS^T)^T k.
 * dk/dv/dq accumulate through Gemm's C input; a "masked" tile adds its
 * bias^T [tile, blockQueries] to the -lse shift that rides on the same C.
 */
import { KernelError } from "../errors.js";
import { GraphBuilder, attr, type Value } from "../graph/builder.js";

export type BlockVariant = "full" | "diagonal" | "diagonalOnly" | "masked";

/** Masked score added above the diagonal (and in document biases): finite so no row ever sees inf - inf. */
export const MASKED = -1e30;

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
  const variant = shape.variant;
  const fixed = variant === "full" ? "" : variant === "masked" ? `:g${shape.group}` : `:g${shape.group}:bq${shape.blockQueries}`;
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

/** Scores S [rows, keys] for the variant ([group, blockQueries, keys] when "masked"); declares the key inputs it needs. */
function scores(g: GraphBuilder, q: Value, shape: BlockShape): Value {
  const d = shape.headDim;
  const transB = { transB: attr.int(1) };
  if (shape.variant === "full") return g.op("Gemm", [q, g.input("k", "float32", ["keys", d])], transB, { name: "s" });
  if (shape.variant === "masked") {
    const s = g.op("Gemm", [q, g.input("k", "float32", ["keys", d])], transB, { name: "s_unmasked" });
    const bias = g.input("bias", "float32", ["queries", "keys"]);
    // [rows = group * queries, keys] -> [group, queries, keys]: bias's shape with the group in front.
    const grouped = g.op("Concat", [g.int64s([shape.group]), g.op("Shape", [bias])], { axis: attr.int(0) });
    return g.op("Add", [g.op("Reshape", [s, grouped]), bias], {}, { name: "s" });
  }
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
  // "masked": [group, queries, *] -> [rows, *] on the way out.
  const rows = (x: Value, shape2: number[]) => (shape.variant === "masked" ? g.op("Reshape", [x, g.int64s(shape2)]) : x);
  g.output(rows(g.op("MatMul", [p, v]), [-1, d]), "o", "float32", ["rows", d]);
  // lse = m + log(sum exp(s - m)) and max(P) = exp(m - lse), so lse = m - log(max P).
  const reduce = { axes: attr.ints([-1]), keepdims: attr.int(0) };
  const m = g.op("ReduceMax", [s], reduce, { name: "row_max" });
  const pMax = g.op("ReduceMax", [p], reduce, { name: "p_max" });
  g.output(rows(g.op("Sub", [m, g.op("Log", [pMax])]), [-1]), "lse", "float32", ["rows"]);
  return g.encode();
}

/** bias_t [tile, queries] + -lse [1, rows] as [tile, rows], broadcasting the bias over the query group. */
function documentShift(g: GraphBuilder, shape: BlockShape, negLse: Value): Value {
  // bias_t [tile, queries] -> [tile, 1, queries]; -lse [1, rows] -> [1, group, queries]
  const biasT = g.op("Unsqueeze", [g.input("bias_t", "float32", ["tile", "queries"]), g.int64s([1])]);
  const grouped = g.op("Reshape", [negLse, g.int64s([1, shape.group, -1])]);
  // [tile, group, queries] -> [tile, rows]
  return g.op("Reshape", [g.op("Add", [biasT, grouped]), g.int64s([0, -1])], {}, { name: "shift" });
}

/**
 * Backward over one key tile: inputs q [rows, d] (scaled), k/v [tile, d],
 * dout [rows, d], lse [1, rows], rowdot [1, rows] (sum(dout * out) per query
 * row), dk_in/dv_in [tile, d], dq_in [rows, d]; outputs dk = dk_in + dS^T q,
 * dv = dv_in + P^T dout [tile, d], dq_scaled = dq_in + dS k [rows, d]. The
 * "diagonalOnly" variant is the causal diagonal tile (tile = blockQueries
 * keys, masked by tri^T); "masked" adds the input bias_t [tile,
 * blockQueries] (documents); "full" tiles need no mask. It works on S^T
 * [tile, rows] (keys on rows), so dv and dk are plain MatMuls of the big
 * operand, which MLAS runs about 1.5x faster than transposed ones.
 */
export function buildBackwardGraph(shape: BlockShape): Uint8Array {
  if (shape.variant === "diagonal") throw new KernelError("backward graphs take whole tiles: use 'full' or 'diagonalOnly'");
  const d = shape.headDim;
  const tile = shape.variant === "diagonalOnly" ? shape.blockQueries : "tile";
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
  const shift =
    shape.variant === "full" ? negLse : shape.variant === "masked" ? documentShift(g, shape, negLse) : g.op("Add", [triangle(g, shape, true), negLse]);
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
