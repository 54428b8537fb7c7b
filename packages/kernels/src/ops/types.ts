/**
 * The block's ops other than attention, forward and backward, as the block and
 * the model call them. All tensors are float32 unless said otherwise; "rows"
 * is any flattening of leading axes (callers reshape [b, s, h] -> [b*s, h]).
 * Backward functions take what forward saved and the output gradient.
 */
import type { Tensor } from "@ulysses/tensors";
import type { RopeScaling } from "./rope-scaling.js";

type F32 = Tensor<"float32">;

/** A first position (token t at offset + t), or every token's position, int32 [batch * seq]. */
export type RopePositions = number | Int32Array;

export interface LayerNormSaved {
  /** [rows] */
  mean: F32;
  /** [rows] reciprocal standard deviation */
  rstd: F32;
}

export interface CrossEntropyResult {
  /** Sum of -log p(label) over rows whose label is not ignored. */
  lossSum: number;
  /** Number of rows whose label is not ignored. */
  count: number;
  /** Each row's -log p(label) (0 where the label is ignored): lossSum's terms, for scoring a text token by token. */
  rowLosses: Float64Array;
}

/** One AdamW update of a slice (see BlockOps.adamwUpdate and @ulysses/training's AdamW). */
export interface AdamWUpdate {
  params: Float32Array;
  grads: Float32Array;
  m: Float32Array;
  v: Float32Array;
  /** One byte per element, 1 where weight decay applies; null: everywhere. */
  decayMask: Uint8Array | null;
  beta1: number;
  beta2: number;
  eps: number;
  lr: number;
  /** lr * weight decay. */
  decay: number;
  /** Bias corrections 1 - beta1^t and 1 - beta2^t. */
  c1: number;
  c2: number;
}

export interface BlockOps {
  /** y[rows, out] = x[rows, in] @ w[in, out] (+ b[out]) */
  linearForward(x: F32, w: F32, b?: F32): Promise<F32>;
  /** db is present when `withBias`. */
  linearBackward(x: F32, w: F32, dy: F32, withBias: boolean): Promise<{ dx: F32; dw: F32; db?: F32 }>;
  /** dx [..., in] = dy [..., out] @ w^T: linearBackward's dx alone. */
  linearInputGradient(w: F32, dy: F32): Promise<F32>;
  /** dw [in, out] = x^T @ dy over all rows: linearBackward's dw alone. */
  linearWeightGradient(x: F32, dy: F32): Promise<F32>;
  /**
   * into [in, out] += x^T @ dy over all rows, in place: linearWeightGradient
   * added into an existing gradient (the LM head's, a loss tile at a time)
   * without a [in, out] temporary. Optional: callers without it use
   * linearWeightGradient and add.
   */
  linearWeightGradientInto?(x: F32, dy: F32, into: F32): Promise<void>;
  /**
   * target += each term, elementwise in place (same sizes; a term may be
   * target itself); returns target. Optional: without it the block adds in
   * JavaScript. An implementation must give the same bits (one float32
   * addition per element and term, in order).
   */
  addInto?(target: F32, ...terms: F32[]): F32;
  /**
   * The caller will neither read nor write these tensors again (nor any view
   * of their data): an implementation may hand their memory out again as
   * later outputs. Optional, and only a hint: without it, or for tensors it
   * did not make, the garbage collector frees them.
   */
  release?(...tensors: Tensor[]): void;

  /** x, y: [rows, hidden]; gamma, beta: [hidden] */
  layerNormForward(x: F32, gamma: F32, beta: F32, eps: number): Promise<{ y: F32 } & LayerNormSaved>;
  layerNormBackward(x: F32, gamma: F32, saved: LayerNormSaved, dy: F32): Promise<{ dx: F32; dGamma: F32; dBeta: F32 }>;

  /** y = x * rstd * gamma with rstd = 1/sqrt(mean(x^2) + eps) */
  rmsNormForward(x: F32, gamma: F32, eps: number): Promise<{ y: F32; rstd: F32 }>;
  rmsNormBackward(x: F32, gamma: F32, rstd: F32, dy: F32): Promise<{ dx: F32; dGamma: F32 }>;

  /** GELU, tanh approximation. */
  geluForward(x: F32): Promise<F32>;
  geluBackward(x: F32, dy: F32): Promise<F32>;

  /** y = silu(gate) * up */
  swigluForward(gate: F32, up: F32): Promise<F32>;
  swigluBackward(gate: F32, up: F32, dy: F32): Promise<{ dGate: F32; dUp: F32 }>;

  /**
   * Rotary embedding on x [batch, seq, heads, headDim] (headDim even), rotating
   * pairs (i, i + headDim/2) (the GPT-NeoX / LLaMA "rotate half" layout) by
   * angle pos * base^(-2i/headDim), those frequencies changed by `scaling`
   * when given (linear, llama3, yarn: rope-scaling.ts). `positions` is the position of the first
   * token (pos = positions + token index), or every token's position as int32
   * [batch * seq] (packed documents: positions restart at each document).
   */
  ropeForward(x: F32, positions: RopePositions, base?: number, scaling?: RopeScaling): Promise<F32>;
  /** The gradient: rotation by the negative angle. */
  ropeBackward(dy: F32, positions: RopePositions, base?: number, scaling?: RopeScaling): Promise<F32>;

  /** ids int32 [rows] -> table rows [rows, hidden] */
  embeddingForward(ids: Tensor<"int32">, table: F32): Promise<F32>;
  /**
   * Scatter-adds dy [rows, hidden] into `into` ([vocab, hidden], e.g. the
   * table's gradient, accumulated in place and returned), or without it into
   * a fresh zero [vocab, hidden] gradient.
   */
  embeddingBackward(ids: Tensor<"int32">, dy: F32, vocab: number, into?: F32): Promise<F32>;
}

/** The loss's ops: cross-entropy over the vocabulary (what the training loss needs besides a model's BlockOps). */
export interface LossOps {
  /** logits [rows, vocab], labels int32 [rows]; labels equal to ignoreIndex (default -100) do not count. */
  crossEntropyForward(logits: F32, labels: Tensor<"int32">, ignoreIndex?: number): Promise<CrossEntropyResult>;
  /** d(gradScale * lossSum)/dlogits; ignored rows get zero gradient. */
  crossEntropyBackward(logits: F32, labels: Tensor<"int32">, gradScale: number, ignoreIndex?: number): Promise<F32>;
  /**
   * crossEntropyForward and, with gradScale a number, crossEntropyBackward in
   * one pass that writes the gradient over `logits` itself (no second [rows,
   * vocab] buffer); also counts the rows whose label is the first index of
   * their largest logit. Optional: a native kernel.
   */
  crossEntropyInPlace?(logits: F32, labels: Tensor<"int32">, gradScale: number | null, ignoreIndex?: number): Promise<CrossEntropyResult & { correct: number }>;
}

/** The optimizer's ops: an optional native AdamW loop. */
export interface OptimizerOps {
  /**
   * One AdamW update in place (params, m and v, one slice of the same
   * length as grads), with the arithmetic of @ulysses/training's
   * AdamW.update: float64 per element, the same operations in the same
   * order, so the same bits. Optional: without it the optimizer runs in
   * JavaScript.
   */
  adamwUpdate?(update: AdamWUpdate): void;
}

/** Everything a training step calls: a block's ops, the loss's and the optimizer's. */
export type TrainingOps = BlockOps & LossOps & OptimizerOps;
