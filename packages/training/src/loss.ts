/**
 * The loss of a model on a batch, on one device or sequence-parallel: each
 * rank computes the cross-entropy sum and the count of labelled tokens of its
 * shard; one allReduce of [lossSum, count, correct] over the model's
 * gradient group (every rank: SP ranks share sequences, DP ranks the batch)
 * gives the global mean, lossSum / count, the same on every rank and equal
 * to the one-device loss. The gradient scale is 1 / global count, so the
 * summed weight gradients are those of the global mean.
 *
 * Tiled (`lossTileRows`, the "fused linear cross-entropy" of Liger-Kernel and
 * ALST): the model's forward stops at the final norm; the labelled tokens are
 * counted and their count all-reduced first (the gradient scale must be known
 * before any logits exist); then for each tile of rows the head's logits, the
 * tile's cross-entropy sum, argmax-correct count and logit gradient, the
 * tile's dh = dLogits W^T (into dhFinal) and its head weight gradient
 * h^T dLogits (accumulated) are computed and the tile's logits dropped; one
 * allReduce of [lossSum, correct] gives the reported loss and accuracy, and
 * the model's backward continues from dhFinal. At most one tile's logits
 * [tile, vocab] (and its gradient) exist at a time instead of [rows, vocab];
 * tiles without a labelled row are skipped (their gradient is zero).
 */
import type { TrainingOps } from "@ulysses/kernels";
import type { CausalLM, CausalLMContext, LMBatch } from "@ulysses/model";
import { Tensor } from "@ulysses/tensors";
import { IGNORE_INDEX } from "./data/batch.js";
import { TrainingError } from "./errors.js";

type F32 = Tensor<"float32">;
type I32 = Tensor<"int32">;

/** A model to train: any CausalLM (the one-device Gpt, or one parallelised with `parallelize`). */
export type TrainModel = CausalLM;

export interface LossResult {
  /** Global mean cross-entropy over labelled tokens. */
  loss: number;
  /** Global number of labelled tokens. */
  count: number;
  /** Global fraction of labelled tokens whose argmax prediction is the label. */
  accuracy: number;
}

export interface LossOptions {
  /** false: forward and loss only (evaluation); the context is released. Default true. */
  backward?: boolean;
  /**
   * Rows of logits per tile (a positive integer): the head and the
   * cross-entropy run a tile at a time, so the full [rows, vocab] logits
   * never exist. 0 or undefined: untiled. Loss, accuracy and gradients equal
   * the untiled ones (up to float32 summation order).
   */
  lossTileRows?: number;
}

/** The tile size of `lossTileRows`: 0 for untiled; throws a TrainingError naming a value that is not 0, undefined or a positive integer. */
export function validateLossTileRows(lossTileRows: number | undefined): number {
  if (lossTileRows === undefined || lossTileRows === 0) return 0;
  if (!Number.isSafeInteger(lossTileRows) || lossTileRows < 0)
    throw new TrainingError(`lossTileRows must be a positive integer (0 or undefined: untiled), got ${lossTileRows}`);
  return lossTileRows;
}

/** Rows of logits [rows, vocab] whose argmax equals the (non-ignored) label. */
export function countCorrect(logits: Tensor<"float32">, labels: Tensor<"int32">): number {
  const [rows, vocab] = logits.shape as [number, number];
  const l = logits.data;
  let correct = 0;
  for (let r = 0; r < rows; r++) {
    const label = labels.data[r]!;
    if (label === IGNORE_INDEX) continue;
    let best = 0;
    for (let v = 1; v < vocab; v++) if (l[r * vocab + v]! > l[r * vocab + best]!) best = v;
    if (best === label) correct++;
  }
  return correct;
}

/** A forward that ran, with the model it ran on. */
interface Run {
  model: TrainModel;
  context: CausalLMContext;
  labels: I32;
}

/** This rank's part of `batch` through the model; `logits` false stops at the final norm. */
async function forward(model: TrainModel, batch: LMBatch, logits: boolean): Promise<Run> {
  const { context, labels } = await model.forwardBatch(batch, { logits });
  return { model, context, labels };
}

/** Labels that count (not IGNORE_INDEX) in [from, to). */
function labelled(labels: I32, from = 0, to = labels.size): number {
  let count = 0;
  for (let r = from; r < to; r++) if (labels.data[r] !== IGNORE_INDEX) count++;
  return count;
}

/**
 * Forward, global loss and backward of this rank's part of `batch` (whole
 * sequences [rows, N]: this DP replica's rows). Adds the rank's unreduced
 * weight gradients into model.params.grads. `lossTileRows` tiles the head and
 * the loss (see the module comment); `backward: false` evaluates only.
 */
export async function lossAndGradients(model: TrainModel, ops: TrainingOps, batch: LMBatch, options: LossOptions = {}): Promise<LossResult> {
  const tileRows = validateLossTileRows(options.lossTileRows);
  const withBackward = options.backward ?? true;
  const group = model.gradientGroup;
  const allReduce = async (values: number[]): Promise<number[]> => {
    const stats = new Float64Array(values);
    if (group !== null && group.size > 1) await group.allReduce(stats, { op: "sum" });
    return [...stats];
  };
  const result = (lossSum: number, count: number, correct: number): LossResult => ({
    loss: count > 0 ? lossSum / count : 0,
    count,
    accuracy: count > 0 ? correct / count : 0,
  });

  if (tileRows === 0) {
    const run = await forward(model, batch, true);
    const [lossSum, count, correct] = (await allReduce(await untiledStats(ops, run))) as [number, number, number];
    if (withBackward) await run.model.backward(run.context, await untiledGradient(ops, run, count > 0 ? 1 / count : 0));
    else run.model.release(run.context);
    return result(lossSum, count, correct);
  }

  const run = await forward(model, batch, false);
  if (!withBackward) {
    const tiled = await tiledHead(ops, run, tileRows, null);
    run.model.release(run.context);
    const [lossSum, count, correct] = (await allReduce([tiled.lossSum, labelled(run.labels), tiled.correct])) as [number, number, number];
    return result(lossSum, count, correct);
  }
  // the global count first: it scales every tile's gradient
  const count = (await allReduce([labelled(run.labels)]))[0]!;
  const tiled = await tiledHead(ops, run, tileRows, count > 0 ? 1 / count : 0);
  const [lossSum, correct] = (await allReduce([tiled.lossSum, tiled.correct])) as [number, number];
  await run.model.backwardFromHidden(run.context, handOver(tiled));
  return result(lossSum, count, correct);
}

/** Takes dhFinal out of the tiles' result, so no local of the caller keeps it alive while the blocks run backward. */
function handOver(tiled: { dhFinal: F32 | null }): F32 {
  const dh = tiled.dhFinal!;
  tiled.dhFinal = null;
  return dh;
}

/** This rank's [lossSum, count, correct] from the context's logits. */
async function untiledStats(ops: TrainingOps, run: Run): Promise<number[]> {
  const logits = run.context.logits!;
  const local = await ops.crossEntropyForward(logits, run.labels, IGNORE_INDEX);
  return [local.lossSum, local.count, countCorrect(logits, run.labels)];
}

/** dLogits of the context's logits; drops the logits from the context (the model's backward needs only dLogits). */
async function untiledGradient(ops: TrainingOps, run: Run, gradScale: number): Promise<F32> {
  const logits = run.context.logits!;
  const dLogits = await ops.crossEntropyBackward(logits, run.labels, gradScale, IGNORE_INDEX);
  run.context.logits = undefined;
  // read for the last time: its memory may serve later outputs
  if (logits.data.buffer !== dLogits.data.buffer) ops.release?.(logits);
  return dLogits;
}

/**
 * One tile's loss sum, correct count and (with gradScale) dLogits: with the
 * ops' in-place cross-entropy, dLogits is the logits' own buffer, overwritten
 * (one [tile, vocab] buffer, not two); otherwise a new tensor.
 */
async function tileLoss(
  ops: TrainingOps,
  logits: F32,
  labels: I32,
  gradScale: number | null,
): Promise<{ lossSum: number; correct: number; dLogits: F32 | null }> {
  if (ops.crossEntropyInPlace !== undefined) {
    const { lossSum, correct } = await ops.crossEntropyInPlace(logits, labels, gradScale, IGNORE_INDEX);
    return { lossSum, correct, dLogits: gradScale === null ? null : logits };
  }
  const { lossSum } = await ops.crossEntropyForward(logits, labels, IGNORE_INDEX);
  const correct = countCorrect(logits, labels);
  return { lossSum, correct, dLogits: gradScale === null ? null : await ops.crossEntropyBackward(logits, labels, gradScale, IGNORE_INDEX) };
}

/**
 * The head and the loss a tile of `tileRows` rows at a time over context.hFinal:
 * this rank's loss sum and correct count and, when `gradScale` is given,
 * dhFinal [rows, hidden] (the head's weight gradients added into params.grads;
 * context.hFinal dropped). Tiles without a labelled row are skipped.
 */
async function tiledHead(
  ops: TrainingOps,
  run: Run,
  tileRows: number,
  gradScale: number | null,
): Promise<{ lossSum: number; correct: number; dhFinal: F32 | null }> {
  const { labels } = run;
  const h = run.context.hFinal!;
  const [rows, hidden] = h.shape as [number, number];
  const dhFinal = gradScale === null ? null : new Tensor("float32", [rows, hidden]);
  const head = run.model.lmHead();
  let lossSum = 0;
  let correct = 0;
  for (let from = 0; from < rows; from += tileRows) {
    const to = Math.min(rows, from + tileRows);
    if (labelled(labels, from, to) === 0) continue;
    const hTile = new Tensor("float32", [to - from, hidden], h.data.subarray(from * hidden, to * hidden));
    const labelsTile = new Tensor("int32", [to - from], labels.data.subarray(from, to));
    const logits = await head.forward(hTile);
    const tile = await tileLoss(ops, logits, labelsTile, gradScale);
    lossSum += tile.lossSum;
    correct += tile.correct;
    if (tile.dLogits !== null) {
      const dh = await head.backward(hTile, tile.dLogits);
      dhFinal!.data.set(dh.data, from * hidden);
      // the tile's buffers, read for the last time, serve the next tile's outputs
      ops.release?.(...new Set([logits, tile.dLogits, dh]));
    } else {
      ops.release?.(logits);
    }
  }
  if (dhFinal !== null) run.context.hFinal = undefined;
  return { lossSum, correct, dhFinal };
}
