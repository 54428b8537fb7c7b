/**
 * The loss of a model on a batch, on one device or sequence-parallel: each
 * rank computes the cross-entropy sum and the count of labelled tokens of its
 * shard; one allReduce of [lossSum, count, correct] over the model's
 * gradient group (every rank: SP ranks share sequences, DP ranks the batch)
 * gives the global mean, lossSum / count, the same on every rank and equal
 * to the one-device loss. The gradient scale is 1 / global count, so the
 * summed weight gradients are those of the global mean.
 */
import type { BlockOps } from "@ulysses/kernels";
import type { Gpt, GptContext } from "@ulysses/model";
import { ParallelGpt, type Batch } from "@ulysses/parallel";
import type { Tensor } from "@ulysses/tensors";
import { IGNORE_INDEX } from "./data/batch.js";

/** A model to train: the one-device Gpt, or one parallelised with `parallelize`. */
export type TrainModel = Gpt | ParallelGpt;

export interface LossResult {
  /** Global mean cross-entropy over labelled tokens. */
  loss: number;
  /** Global number of labelled tokens. */
  count: number;
  /** Global fraction of labelled tokens whose argmax prediction is the label. */
  accuracy: number;
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

/** This rank's part of `batch` through the model: forward, and a backward closure. */
async function run(
  model: TrainModel,
  batch: Batch,
): Promise<{ context: GptContext; labels: Tensor<"int32">; backward: (dLogits: Tensor<"float32">) => Promise<void>; release: () => void }> {
  if (model instanceof ParallelGpt) {
    const shard = model.shard(batch);
    const context = await model.forwardShard(shard);
    return { context, labels: shard.labels, backward: (d) => model.backward(context, d), release: () => model.release(context) };
  }
  const documents = batch.documents;
  const context = await model.forward(batch.tokens, documents === undefined ? {} : { positions: documents.positions.data, documents: documents.ids.data });
  return { context, labels: batch.labels, backward: (d) => model.backward(context, d), release: () => model.release(context) };
}

/**
 * Forward, global loss and backward of this rank's part of `batch` (whole
 * sequences [rows, N]: this DP replica's rows). Adds the rank's unreduced
 * weight gradients into model.params.grads.
 */
export async function lossAndGradients(model: TrainModel, ops: BlockOps, batch: Batch, options: { backward?: boolean } = {}): Promise<LossResult> {
  const { context, labels: shardLabels, backward, release } = await run(model, batch);
  const labels = shardLabels.reshape([shardLabels.size]);
  const local = await ops.crossEntropyForward(context.logits, labels, IGNORE_INDEX);
  const stats = new Float64Array([local.lossSum, local.count, countCorrect(context.logits, labels)]);
  const group = model instanceof ParallelGpt ? model.gradientGroup : null;
  if (group !== null && group.size > 1) await group.allReduce(stats, { op: "sum" });
  const [lossSum, count, correct] = stats as unknown as [number, number, number];
  if (options.backward ?? true) {
    await backward(await ops.crossEntropyBackward(context.logits, labels, count > 0 ? 1 / count : 0, IGNORE_INDEX));
  } else {
    release();
  }
  return { loss: count > 0 ? lossSum / count : 0, count, accuracy: count > 0 ? correct / count : 0 };
}
