/**
 * OrtOps: the block's ops run as ONNX graphs by onnxruntime-node (graphs in
 * `ort-graphs.ts`, sessions cached per op and shape by the SessionCache).
 * Inputs are passed without copies; leading axes are folded into rows with
 * free reshapes. Two steps stay in TypeScript because they are O(rows) or a
 * plain scatter: picking the label logits / subtracting at the labels in
 * cross-entropy, and embedding backward's scatter-add (a loop over
 * rows * hidden that writes the fresh [vocab, hidden] gradient once, cheaper
 * than feeding ONNX Runtime a zero tensor to ScatterND into).
 */
import { Tensor } from "@ulysses/tensors";
import { KernelError } from "../errors.js";
import { DEFAULT_IGNORE_INDEX } from "../reference/embedding-loss.js";
import { DEFAULT_ROPE_BASE } from "../reference/ops.js";
import { ropeScalingKey, ropeTables, type RopeScaling } from "./rope-scaling.js";
import type { SessionCache } from "../runtime/session-cache.js";
import * as graphs from "./ort-graphs.js";
import type { CrossEntropyResult, LayerNormSaved, RopePositions, TrainingOps } from "./types.js";
import { checkIds, checkLabels, expectSameShape, expectShape, expectSize, linearGradientShapes, linearShapes, ropeShape, rowsAndLast } from "./validate.js";

type F32 = Tensor<"float32">;

function float32(op: string, name: string, t: Tensor): void {
  if (t.dtype !== "float32") throw new KernelError(`${op}: ${name} must be float32, got ${t}`);
}

/**
 * cos and sin tables of `shape` ([..., 1, headDim]) for one position per
 * table row (positions.length = size / headDim): rope-scaling.ts's
 * ropeTables (yarn's attention factor in both, so forward and backward scale
 * by it).
 */
function ropeCosSin(shape: number[], positions: ArrayLike<number>, base: number, scaling: RopeScaling | undefined): { cos: F32; sin: F32 } {
  const { cos, sin } = ropeTables(positions, shape[shape.length - 1]!, base, scaling);
  return { cos: new Tensor("float32", shape, cos), sin: new Tensor("float32", shape, sin) };
}

function sameValues(a: Int32Array, b: Int32Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export class OrtOps implements TrainingOps {
  private readonly ropeTables = new Map<string, { cos: F32; sin: F32 }>();
  private lastTokenTable: { key: string; positions: Int32Array; table: { cos: F32; sin: F32 } } | undefined;

  constructor(readonly cache: SessionCache) {}

  private async run(key: string, build: () => Uint8Array, feeds: Record<string, Tensor>): Promise<Record<string, F32>> {
    return (await this.cache.run(key, build, feeds)) as Record<string, F32>;
  }

  async linearForward(x: F32, w: F32, b?: F32): Promise<F32> {
    const { rows, inF, outF } = linearShapes("linearForward", x, w, b);
    float32("linearForward", "x", x);
    // x [..., in] -> [rows, in]
    const feeds: Record<string, Tensor> = { x: x.reshape([rows, inF]), w };
    if (b) feeds.b = b;
    const { y } = await this.run(`linear.fwd ${rows}x${inF}x${outF} bias=${!!b}`, () => graphs.linearForwardGraph(rows, inF, outF, !!b), feeds);
    // y [rows, out] -> [..., out]
    return y!.reshape([...x.shape.slice(0, -1), outF]);
  }

  async linearBackward(x: F32, w: F32, dy: F32, withBias: boolean): Promise<{ dx: F32; dw: F32; db?: F32 }> {
    const { rows, inF, outF } = linearShapes("linearBackward", x, w);
    expectSize("linearBackward", "dy (rows * out)", dy, rows * outF);
    // x [..., in] -> [rows, in]; dy [..., out] -> [rows, out]
    const out = await this.run(`linear.bwd ${rows}x${inF}x${outF} bias=${withBias}`, () => graphs.linearBackwardGraph(rows, inF, outF, withBias), {
      x: x.reshape([rows, inF]),
      w,
      dy: dy.reshape([rows, outF]),
    });
    const result: { dx: F32; dw: F32; db?: F32 } = { dx: out.dx!.reshape(x.shape), dw: out.dw! };
    if (withBias) result.db = out.db!;
    return result;
  }

  async linearInputGradient(w: F32, dy: F32): Promise<F32> {
    const { rows, inF, outF } = linearGradientShapes("linearInputGradient", w, dy, "x");
    // dy [..., out] -> [rows, out]; dx [rows, in] -> [..., in]
    const { dx } = await this.run(`linear.dx ${rows}x${inF}x${outF}`, () => graphs.linearGradientGraph(rows, inF, outF, "x"), {
      w,
      dy: dy.reshape([rows, outF]),
    });
    return dx!.reshape([...dy.shape.slice(0, -1), inF]);
  }

  async linearWeightGradient(x: F32, dy: F32): Promise<F32> {
    const { rows, inF, outF } = linearGradientShapes("linearWeightGradient", x, dy, "w");
    // x [..., in] -> [rows, in]; dy [..., out] -> [rows, out]
    const { dw } = await this.run(`linear.dw ${rows}x${inF}x${outF}`, () => graphs.linearGradientGraph(rows, inF, outF, "w"), {
      x: x.reshape([rows, inF]),
      dy: dy.reshape([rows, outF]),
    });
    return dw!;
  }

  /** layerNormForward's checks: x [..., h], gamma and beta [h]; its rows and h. */
  protected layerNormForwardShape(x: F32, gamma: F32, beta: F32): { rows: number; h: number } {
    const { rows, last: h } = rowsAndLast("layerNormForward", "x", x);
    expectShape("layerNormForward", "gamma", gamma, [h]);
    expectShape("layerNormForward", "beta", beta, [h]);
    return { rows, h };
  }

  /** layerNormBackward's checks: x and dy [..., h], gamma [h], the saved mean and rstd [rows]; its rows and h. */
  protected layerNormBackwardShape(x: F32, gamma: F32, saved: LayerNormSaved, dy: F32): { rows: number; h: number } {
    const { rows, last: h } = rowsAndLast("layerNormBackward", "x", x);
    expectSameShape("layerNormBackward", ["x", "dy"], x, dy);
    expectShape("layerNormBackward", "gamma", gamma, [h]);
    expectSize("layerNormBackward", "mean", saved.mean, rows);
    expectSize("layerNormBackward", "rstd", saved.rstd, rows);
    return { rows, h };
  }

  async layerNormForward(x: F32, gamma: F32, beta: F32, eps: number): Promise<{ y: F32 } & LayerNormSaved> {
    const { rows, h } = this.layerNormForwardShape(x, gamma, beta);
    // x [..., h] -> [rows, h]
    const out = await this.run(`layerNorm.fwd ${rows}x${h} eps=${eps}`, () => graphs.layerNormForwardGraph(rows, h, eps), {
      x: x.reshape([rows, h]),
      gamma,
      beta,
    });
    // mean, rstd [rows, 1] -> [rows]
    return { y: out.y!.reshape(x.shape), mean: out.mean!.reshape([rows]), rstd: out.rstd!.reshape([rows]) };
  }

  async layerNormBackward(x: F32, gamma: F32, saved: LayerNormSaved, dy: F32): Promise<{ dx: F32; dGamma: F32; dBeta: F32 }> {
    const { rows, h } = this.layerNormBackwardShape(x, gamma, saved, dy);
    // x, dy [..., h] -> [rows, h]; mean, rstd [rows] -> [rows, 1]
    const out = await this.run(`layerNorm.bwd ${rows}x${h}`, () => graphs.layerNormBackwardGraph(rows, h), {
      x: x.reshape([rows, h]),
      gamma,
      mean: saved.mean.reshape([rows, 1]),
      rstd: saved.rstd.reshape([rows, 1]),
      dy: dy.reshape([rows, h]),
    });
    return { dx: out.dx!.reshape(x.shape), dGamma: out.dGamma!, dBeta: out.dBeta! };
  }

  async rmsNormForward(x: F32, gamma: F32, eps: number): Promise<{ y: F32; rstd: F32 }> {
    const { rows, last: h } = rowsAndLast("rmsNormForward", "x", x);
    expectShape("rmsNormForward", "gamma", gamma, [h]);
    // x [..., h] -> [rows, h]
    const out = await this.run(`rmsNorm.fwd ${rows}x${h} eps=${eps}`, () => graphs.rmsNormForwardGraph(rows, h, eps), { x: x.reshape([rows, h]), gamma });
    // rstd [rows, 1] -> [rows]
    return { y: out.y!.reshape(x.shape), rstd: out.rstd!.reshape([rows]) };
  }

  async rmsNormBackward(x: F32, gamma: F32, rstd: F32, dy: F32): Promise<{ dx: F32; dGamma: F32 }> {
    const { rows, last: h } = rowsAndLast("rmsNormBackward", "x", x);
    expectSameShape("rmsNormBackward", ["x", "dy"], x, dy);
    expectShape("rmsNormBackward", "gamma", gamma, [h]);
    expectSize("rmsNormBackward", "rstd", rstd, rows);
    // x, dy [..., h] -> [rows, h]; rstd [rows] -> [rows, 1]
    const out = await this.run(`rmsNorm.bwd ${rows}x${h}`, () => graphs.rmsNormBackwardGraph(rows, h), {
      x: x.reshape([rows, h]),
      gamma,
      rstd: rstd.reshape([rows, 1]),
      dy: dy.reshape([rows, h]),
    });
    return { dx: out.dx!.reshape(x.shape), dGamma: out.dGamma! };
  }

  async geluForward(x: F32): Promise<F32> {
    // any shape -> [size]
    const { y } = await this.run(`gelu.fwd ${x.size}`, () => graphs.geluForwardGraph(x.size), { x: x.reshape([x.size]) });
    return y!.reshape(x.shape);
  }

  async geluBackward(x: F32, dy: F32): Promise<F32> {
    expectSameShape("geluBackward", ["x", "dy"], x, dy);
    // any shape -> [size]
    const { dx } = await this.run(`gelu.bwd ${x.size}`, () => graphs.geluBackwardGraph(x.size), { x: x.reshape([x.size]), dy: dy.reshape([x.size]) });
    return dx!.reshape(x.shape);
  }

  async swigluForward(gate: F32, up: F32): Promise<F32> {
    expectSameShape("swigluForward", ["gate", "up"], gate, up);
    const n = gate.size;
    // any shape -> [size]
    const { y } = await this.run(`swiglu.fwd ${n}`, () => graphs.swigluForwardGraph(n), { gate: gate.reshape([n]), up: up.reshape([n]) });
    return y!.reshape(gate.shape);
  }

  async swigluBackward(gate: F32, up: F32, dy: F32): Promise<{ dGate: F32; dUp: F32 }> {
    expectSameShape("swigluBackward", ["gate", "up"], gate, up);
    expectSameShape("swigluBackward", ["gate", "dy"], gate, dy);
    const n = gate.size;
    // any shape -> [size]
    const out = await this.run(`swiglu.bwd ${n}`, () => graphs.swigluBackwardGraph(n), { gate: gate.reshape([n]), up: up.reshape([n]), dy: dy.reshape([n]) });
    return { dGate: out.dGate!.reshape(gate.shape), dUp: out.dUp!.reshape(gate.shape) };
  }

  /** cos and sin [seq, 1, headDim] for positions offset .. offset + seq - 1 (cached by shape, offset, base and scaling). */
  private ropeTable(seq: number, headDim: number, offset: number, base: number, scaling: RopeScaling | undefined): { cos: F32; sin: F32 } {
    const key = `${seq} ${headDim} ${offset} ${base} ${ropeScalingKey(scaling)}`;
    let table = this.ropeTables.get(key);
    if (!table) {
      const positions = new Float64Array(seq);
      for (let t = 0; t < seq; t++) positions[t] = offset + t;
      table = ropeCosSin([seq, 1, headDim], positions, base, scaling);
      if (this.ropeTables.size >= 64) this.ropeTables.clear();
      this.ropeTables.set(key, table);
    }
    return table;
  }

  /**
   * cos and sin [batch, seq, 1, headDim] for every token's own position.
   * Packings change every batch, so only the last table is kept (a copy of
   * its positions, compared entry by entry: O(batch * seq), against
   * batch * seq * headDim / 2 cos and sin to build one); forward and
   * backward of one step, and the layers of one model, build it once.
   */
  private ropeTokenTable(dims: readonly number[], positions: Int32Array, base: number, scaling: RopeScaling | undefined): { cos: F32; sin: F32 } {
    const [batch, seq, , headDim] = dims as [number, number, number, number];
    const last = this.lastTokenTable;
    const key = `${batch} ${seq} ${headDim} ${base} ${ropeScalingKey(scaling)}`;
    if (last && last.key === key && sameValues(last.positions, positions)) return last.table;
    const table = ropeCosSin([batch, seq, 1, headDim], positions, base, scaling);
    this.lastTokenTable = { key, positions: positions.slice(), table };
    return table;
  }

  /**
   * The rope ops' checks and tables: x's dims [batch, seq, heads, headDim], and cos and sin [seq, 1, headDim] (positions from an
   * offset) or [batch, seq, 1, headDim] (every token's own, perToken); `scaling` changes the frequencies.
   */
  protected ropeInputs(
    direction: "fwd" | "bwd",
    x: F32,
    positions: RopePositions,
    base: number,
    scaling?: RopeScaling,
  ): { dims: [number, number, number, number]; perToken: boolean; cos: F32; sin: F32 } {
    const dims = ropeShape(direction === "fwd" ? "ropeForward" : "ropeBackward", x, positions, base, scaling);
    const perToken = positions instanceof Int32Array;
    const table = perToken ? this.ropeTokenTable(dims, positions, base, scaling) : this.ropeTable(dims[1], dims[3], positions, base, scaling);
    return { dims, perToken, ...table };
  }

  private async rope(direction: "fwd" | "bwd", x: F32, positions: RopePositions, base: number, scaling: RopeScaling | undefined): Promise<F32> {
    const { dims, perToken, cos, sin } = this.ropeInputs(direction, x, positions, base, scaling);
    const key = `rope.${direction} ${dims.join("x")}${perToken ? " per-token" : ""}`;
    if (direction === "fwd") return (await this.run(key, () => graphs.ropeForwardGraph(dims, perToken), { x, cos, sin })).y!;
    return (await this.run(key, () => graphs.ropeBackwardGraph(dims, perToken), { dy: x, cos, sin })).dx!;
  }

  ropeForward(x: F32, positions: RopePositions, base = DEFAULT_ROPE_BASE, scaling?: RopeScaling): Promise<F32> {
    return this.rope("fwd", x, positions, base, scaling);
  }

  ropeBackward(dy: F32, positions: RopePositions, base = DEFAULT_ROPE_BASE, scaling?: RopeScaling): Promise<F32> {
    return this.rope("bwd", dy, positions, base, scaling);
  }

  async embeddingForward(ids: Tensor<"int32">, table: F32): Promise<F32> {
    if (table.rank !== 2) throw new KernelError(`embeddingForward: table must be [vocab, hidden], got ${table}`);
    const [vocab, h] = table.shape as [number, number];
    checkIds("embeddingForward", ids, vocab);
    const n = ids.size;
    // ids [...] -> [n]
    const { out } = await this.run(`embedding.fwd ${n}x${vocab}x${h}`, () => graphs.embeddingForwardGraph(n, vocab, h), { table, ids: ids.reshape([n]) });
    // out [n, h] -> [..., h]
    return out!.reshape([...ids.shape, h]);
  }

  async embeddingBackward(ids: Tensor<"int32">, dy: F32, vocab: number, into?: F32): Promise<F32> {
    checkIds("embeddingBackward", ids, vocab);
    const h = dy.shape[dy.rank - 1]!;
    expectSize("embeddingBackward", "dy (ids.size * hidden)", dy, ids.size * h);
    if (into !== undefined) {
      float32("embeddingBackward", "into", into);
      expectShape("embeddingBackward", "into", into, [vocab, h]);
    }
    // in place when given: a fresh [vocab, hidden] gradient is as large as the table (32 MiB at vocab 32768, hidden 256)
    const grad = into ?? new Tensor("float32", [vocab, h]);
    const g = grad.data,
      d = dy.data;
    for (let r = 0; r < ids.size; r++) {
      const to = ids.data[r]! * h,
        from = r * h;
      for (let i = 0; i < h; i++) g[to + i] += d[from + i]!;
    }
    return grad;
  }

  private logitsShape(op: string, logits: F32): [number, number] {
    if (logits.rank !== 2) throw new KernelError(`${op}: logits must be [rows, vocab], got ${logits}`);
    float32(op, "logits", logits);
    return logits.shape as [number, number];
  }

  async crossEntropyForward(logits: F32, labels: Tensor<"int32">, ignoreIndex = DEFAULT_IGNORE_INDEX): Promise<CrossEntropyResult> {
    const [rows, vocab] = this.logitsShape("crossEntropyForward", logits);
    const count = checkLabels("crossEntropyForward", labels, rows, vocab, ignoreIndex);
    const { lse } = await this.run(`crossEntropy.fwd ${rows}x${vocab}`, () => graphs.logSumExpGraph(rows, vocab), { logits });
    let lossSum = 0;
    const rowLosses = new Float64Array(rows);
    for (let r = 0; r < rows; r++) {
      const label = labels.data[r]!;
      if (label !== ignoreIndex) {
        rowLosses[r] = lse!.data[r]! - logits.data[r * vocab + label]!;
        lossSum += rowLosses[r]!;
      }
    }
    return { lossSum, count, rowLosses };
  }

  async crossEntropyBackward(logits: F32, labels: Tensor<"int32">, gradScale: number, ignoreIndex = DEFAULT_IGNORE_INDEX): Promise<F32> {
    const [rows, vocab] = this.logitsShape("crossEntropyBackward", logits);
    checkLabels("crossEntropyBackward", labels, rows, vocab, ignoreIndex);
    const rowScale = new Tensor("float32", [rows, 1]);
    for (let r = 0; r < rows; r++) rowScale.data[r] = labels.data[r] === ignoreIndex ? 0 : gradScale;
    const { grad } = await this.run(`crossEntropy.bwd ${rows}x${vocab}`, () => graphs.scaledSoftmaxGraph(rows, vocab), { logits, rowScale });
    // d/dlogits of -log softmax[label]: softmax - onehot(label), per counted row
    for (let r = 0; r < rows; r++) {
      const label = labels.data[r]!;
      if (label !== ignoreIndex) grad!.data[r * vocab + label] -= gradScale;
    }
    return grad!;
  }
}

/** A BlockOps backed by ONNX Runtime sessions from `cache`. */
export function createOrtOps(cache: SessionCache): TrainingOps {
  return new OrtOps(cache);
}
