/**
 * FusedOps: OrtOps (every block op an ONNX Runtime graph) with GELU, LayerNorm
 * and rotary embedding, forward and backward, replaced by the addon's native
 * single-pass kernels (native/src/cpu, vectorized per instruction set like
 * the attention kernels). ONNX Runtime runs each as a graph of elementwise
 * and reduction nodes (GELU's backward about 14, rope's Split, Neg, Concat,
 * Mul and Add), each a pass over memory; the native kernels read their inputs
 * once and write once. They run synchronously on the calling thread (GELU
 * alone; LayerNorm and rope also on up to the cache's intra-op threads - 1
 * more, each a range of rows, when each gets 64K floats), into fresh float32
 * tensors, whose bytes are told to the SessionCache's garbage collector as
 * its own outputs are. Rope uses OrtOps' cos and sin tables.
 *
 * addInto (residual and gradient sums) is one vectorized pass per term, and
 * adamwUpdate the optimizer's float64 loop in C++: the same bits as the
 * JavaScript they replace.
 *
 * linearWeightGradientInto adds x^T dy into an existing gradient in place
 * with the addon's register-tiled matrix product (the attention kernels'),
 * on the SessionCache's intra-op thread count: the tiled LM head adds each
 * loss tile's [hidden, vocab] weight gradient this way, with no temporary of
 * that size and no pass over it in JavaScript. linearForward runs the same
 * product for deep shapes (the tied head's dh = dLogits E), reading the
 * [vocab, hidden] weight once per call.
 */
import {
  BufferPool,
  DEFAULT_ROPE_BASE,
  OrtOps,
  type AdamWUpdate,
  type CrossEntropyResult,
  type TrainingOps,
  type LayerNormSaved,
  type RopePositions,
  type RopeScaling,
  type SessionCache,
} from "@ulysses/kernels";
import { formatShape, numel, Tensor } from "@ulysses/tensors";
import { FusedAttentionError } from "./errors.js";
import type { CpuIsa } from "./fused-attention.js";
import { loadNative, type NativeBinding } from "./native.js";
import { NativeSessionCache } from "./native-session-cache.js";

type F32 = Tensor<"float32">;

export interface FusedOpsOptions {
  /**
   * The GELU kernels' instruction set (default "auto": the best this
   * processor has). For tests and benchmarks; an unsupported one throws.
   */
  isa?: CpuIsa;
}

function checkFloat32(op: string, name: string, t: Tensor): void {
  if (t.dtype !== "float32") throw new FusedAttentionError(`${op}: ${name} must be float32, got ${t}`);
}

/**
 * The BlockOps methods FusedOps runs natively (linearForward for deep
 * products only, its other shapes OrtOps' graph); every other op is OrtOps'
 * ONNX Runtime graph.
 */
export const NATIVE_OPS: ReadonlySet<string> = new Set([
  "geluForward",
  "geluBackward",
  "layerNormForward",
  "layerNormBackward",
  "ropeForward",
  "ropeBackward",
  "addInto",
  "adamwUpdate",
  "linearWeightGradientInto",
  "crossEntropyInPlace",
  "linearForward",
]);

/** FusedOps.linearForward runs the addon's matmul where the product's depth (in) is at least this many times its width (out). */
export const DEEP_PRODUCT_RATIO = 16;

export class FusedOps extends OrtOps {
  readonly isa: CpuIsa;
  private readonly binding: NativeBinding;
  /** Where outputs come from and released ones go: the NativeSessionCache's pool, or none (every output fresh). */
  private readonly pool: BufferPool;

  /** Throws FusedAttentionError (saying how to build it) when the addon is not built or fails to load, or when the processor lacks `isa`. */
  constructor(cache: SessionCache, options: FusedOpsOptions = {}) {
    super(cache);
    const native = loadNative();
    if (!native.ok) throw native.error;
    const isa = options.isa ?? "auto";
    try {
      // checks the isa's name and that this processor runs it
      native.binding.geluForward(new Float32Array(0), new Float32Array(0), isa);
    } catch (error) {
      throw new FusedAttentionError(`FusedOps: ${(error as Error).message}`, { cause: error });
    }
    this.binding = native.binding;
    this.isa = isa;
    this.pool = cache instanceof NativeSessionCache ? cache.outputs : new BufferPool({ maxBytes: 0 });
  }

  /**
   * A fresh output, not zero-filled (every native op here writes each
   * element of its outputs), its bytes counted as SessionCache.run counts its
   * outputs'.
   */
  private output(shape: readonly number[]): F32 {
    const t = new Tensor("float32", shape, this.pool.take("float32", numel(shape)) as Float32Array);
    this.cache.collector?.allocated(t.data.byteLength);
    return t;
  }

  override async geluForward(x: F32): Promise<F32> {
    checkFloat32("geluForward", "x", x);
    const y = this.output(x.shape);
    this.binding.geluForward(x.data, y.data, this.isa);
    return y;
  }

  /**
   * BlockOps.release: the tensors' buffers go back to the pool for later
   * outputs of the same size (outputs of this object or its cache only;
   * anything else is left alone).
   */
  release(...tensors: Tensor[]): void {
    for (const t of tensors) if (t.dtype === "float32" || t.dtype === "int32") this.pool.give(t.data as Float32Array | Int32Array);
  }

  /** target += each term, elementwise in place (a term may be target itself); the bits of the float32 sums in JavaScript. */
  addInto(target: F32, ...terms: F32[]): F32 {
    checkFloat32("addInto", "target", target);
    for (const term of terms) {
      checkFloat32("addInto", "term", term);
      if (term.size !== target.size)
        throw new FusedAttentionError(
          `addInto: term ${formatShape(term.shape)} has ${term.size} elements, target ${formatShape(target.shape)} has ${target.size}`,
        );
      this.binding.addInto(term.data, target.data, this.isa);
    }
    return target;
  }

  /** One AdamW update in place, natively (BlockOps.adamwUpdate: the bits of AdamW.update's JavaScript). */
  adamwUpdate(u: AdamWUpdate): void {
    this.binding.adamwUpdate(u.params, u.grads, u.m, u.v, u.decayMask, u.beta1, u.beta2, u.eps, u.lr, u.decay, u.c1, u.c2, this.isa);
  }

  /**
   * LossOps.crossEntropyInPlace, natively: one pass per row for the loss and
   * the argmax, one more that writes the gradient over the logits (with
   * gradScale). Labels equal to ignoreIndex (default -100) do not count.
   */
  async crossEntropyInPlace(
    logits: F32,
    labels: Tensor<"int32">,
    gradScale: number | null,
    ignoreIndex = -100,
  ): Promise<CrossEntropyResult & { correct: number }> {
    const op = "crossEntropyInPlace";
    checkFloat32(op, "logits", logits);
    if (logits.rank !== 2) throw new FusedAttentionError(`${op}: logits must be [rows, vocab], got ${formatShape(logits.shape)}`);
    const [rows, vocab] = logits.shape as [number, number];
    if (labels.dtype !== "int32" || labels.size !== rows)
      throw new FusedAttentionError(`${op}: labels must be int32 with ${rows} elements (one per logits row), got ${labels.dtype} ${formatShape(labels.shape)}`);
    const rowLoss = new Float32Array(rows);
    const argmax = new Int32Array(rows);
    this.binding.crossEntropy(logits.data, labels.data, rowLoss, argmax, rows, vocab, ignoreIndex, gradScale, this.cache.intraOpThreads, this.isa);
    const rowLosses = new Float64Array(rows);
    let lossSum = 0;
    let count = 0;
    let correct = 0;
    for (let r = 0; r < rows; r++) {
      const label = labels.data[r]!;
      if (label === ignoreIndex) continue;
      count++;
      rowLosses[r] = rowLoss[r]!;
      lossSum += rowLosses[r]!;
      if (argmax[r] === label) correct++;
    }
    return { lossSum, count, rowLosses, correct };
  }

  /**
   * y = x w, OrtOps' linear forward. A deep product without a bias (in at
   * least DEEP_PRODUCT_RATIO times out: the tied LM head's dh = dLogits E,
   * in = the vocabulary) runs the addon's matmul on the SessionCache's
   * intra-op threads, which reads w from memory once, where ONNX Runtime's
   * MatMul packs all of it on every call; every other shape is OrtOps' graph.
   */
  override async linearForward(x: F32, w: F32, b?: F32): Promise<F32> {
    const [inF = 0, outF = 0] = w.shape;
    const deep = b === undefined && w.rank === 2 && outF > 0 && inF >= DEEP_PRODUCT_RATIO * outF;
    if (!deep || x.dtype !== "float32" || w.dtype !== "float32" || x.rank < 2 || x.shape[x.rank - 1] !== inF) return super.linearForward(x, w, b);
    const y = this.output([...x.shape.slice(0, -1), outF]);
    this.binding.matmul(x.data, w.data, y.data, x.size / inF, inF, outF, this.cache.intraOpThreads, this.isa);
    return y;
  }

  async linearWeightGradientInto(x: F32, dy: F32, into: F32): Promise<void> {
    const op = "linearWeightGradientInto";
    checkFloat32(op, "x", x);
    checkFloat32(op, "dy", dy);
    checkFloat32(op, "into", into);
    const inFeatures = x.shape[x.rank - 1] ?? 0;
    const outFeatures = dy.shape[dy.rank - 1] ?? 0;
    const rows = x.rank === 0 || inFeatures === 0 ? 0 : x.size / inFeatures;
    const sameRows = x.rank === dy.rank && x.shape.slice(0, -1).every((d, i) => d === dy.shape[i]);
    if (x.rank < 2 || !sameRows)
      throw new FusedAttentionError(
        `${op}: x [..., in] and dy [..., out] must share their leading axes, got x ${formatShape(x.shape)} and dy ${formatShape(dy.shape)}`,
      );
    if (into.rank !== 2 || into.shape[0] !== inFeatures || into.shape[1] !== outFeatures)
      throw new FusedAttentionError(`${op}: into must be [${inFeatures}, ${outFeatures}] (x's last axis, dy's last axis), got ${formatShape(into.shape)}`);
    this.binding.weightGradient(x.data, dy.data, into.data, rows, inFeatures, outFeatures, this.cache.intraOpThreads, this.isa);
  }

  override async layerNormForward(x: F32, gamma: F32, beta: F32, eps: number): Promise<{ y: F32 } & LayerNormSaved> {
    const { rows, h } = this.layerNormForwardShape(x, gamma, beta);
    const y = this.output(x.shape);
    const mean = this.output([rows]);
    const rstd = this.output([rows]);
    this.binding.layerNormForward(x.data, gamma.data, beta.data, y.data, mean.data, rstd.data, rows, h, eps, this.cache.intraOpThreads, this.isa);
    return { y, mean, rstd };
  }

  override async layerNormBackward(x: F32, gamma: F32, saved: LayerNormSaved, dy: F32): Promise<{ dx: F32; dGamma: F32; dBeta: F32 }> {
    const { rows, h } = this.layerNormBackwardShape(x, gamma, saved, dy);
    const dx = this.output(x.shape);
    const dGamma = this.output([h]);
    const dBeta = this.output([h]);
    this.binding.layerNormBackward(
      x.data,
      gamma.data,
      saved.mean.data,
      saved.rstd.data,
      dy.data,
      dx.data,
      dGamma.data,
      dBeta.data,
      rows,
      h,
      this.cache.intraOpThreads,
      this.isa,
    );
    return { dx, dGamma, dBeta };
  }

  private rotate(direction: "fwd" | "bwd", x: F32, positions: RopePositions, base: number, scaling: RopeScaling | undefined): F32 {
    const { dims, perToken, cos, sin } = this.ropeInputs(direction, x, positions, base, scaling);
    const [batch, seq, heads, headDim] = dims;
    const y = this.output(x.shape);
    if (y.size === 0) return y;
    this.binding.rope(
      x.data,
      cos.data,
      sin.data,
      y.data,
      batch * seq,
      heads,
      headDim,
      perToken ? batch * seq : seq,
      direction === "bwd",
      this.cache.intraOpThreads,
      this.isa,
    );
    return y;
  }

  override async ropeForward(x: F32, positions: RopePositions, base = DEFAULT_ROPE_BASE, scaling?: RopeScaling): Promise<F32> {
    return this.rotate("fwd", x, positions, base, scaling);
  }

  override async ropeBackward(dy: F32, positions: RopePositions, base = DEFAULT_ROPE_BASE, scaling?: RopeScaling): Promise<F32> {
    return this.rotate("bwd", dy, positions, base, scaling);
  }

  override async geluBackward(x: F32, dy: F32): Promise<F32> {
    checkFloat32("geluBackward", "x", x);
    checkFloat32("geluBackward", "dy", dy);
    if (dy.rank !== x.rank || dy.shape.some((d, i) => d !== x.shape[i])) {
      throw new FusedAttentionError(`geluBackward: dy must have the shape of x ${formatShape(x.shape)}, got ${formatShape(dy.shape)}`);
    }
    const dx = this.output(x.shape);
    this.binding.geluBackward(x.data, dy.data, dx.data, this.isa);
    return dx;
  }
}

/**
 * FusedOps on `cache` (GELU, LayerNorm and rope native, with the optional addInto, adamwUpdate and linearWeightGradientInto; every
 * other op OrtOps'); throws FusedAttentionError when the addon is not built.
 */
export function createFusedOps(cache: SessionCache, options: FusedOpsOptions = {}): TrainingOps {
  return new FusedOps(cache, options);
}
