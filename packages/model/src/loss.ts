/**
 * The sequence-parallel loss: each rank computes the cross-entropy sum and the
 * count of labelled tokens of its shard; one allReduce of [lossSum, count,
 * correct] over the group that shares the loss (SP, times DP when dp > 1)
 * gives the global mean, lossSum / count, the same on every rank and equal to
 * the single-device loss. The gradient scale is 1 / global count, so the
 * summed weight gradients are those of the global mean.
 */
import type { ProcessGroup } from "@ulysses/collectives";
import type { BlockOps } from "@ulysses/kernels";
import type { Tensor } from "@ulysses/tensors";
import { IGNORE_INDEX, type BatchShard } from "./data/batch.js";
import type { Gpt } from "./gpt.js";

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

/**
 * Forward, global loss and backward on this rank's shard. Adds the rank's
 * unreduced weight gradients into model.params.grads. `lossGroup` is every
 * rank whose tokens share the mean (the world group when dp > 1).
 */
export async function lossAndGradients(model: Gpt, ops: BlockOps, shard: BatchShard, lossGroup: ProcessGroup, options: { backward?: boolean } = {}): Promise<LossResult> {
  const context = await model.forward(shard.tokens, shard.seqLength);
  const labels = shard.labels.reshape([shard.labels.size]);
  const local = await ops.crossEntropyForward(context.logits, labels, IGNORE_INDEX);
  const stats = new Float64Array([local.lossSum, local.count, countCorrect(context.logits, labels)]);
  if (lossGroup.size > 1) await lossGroup.allReduce(stats, { op: "sum" });
  const [lossSum, count, correct] = stats as unknown as [number, number, number];
  if (options.backward ?? true) {
    const dLogits = await ops.crossEntropyBackward(context.logits, labels, count > 0 ? 1 / count : 0, IGNORE_INDEX);
    await model.backward(context, dLogits);
  }
  return { loss: count > 0 ? lossSum / count : 0, count, accuracy: count > 0 ? correct / count : 0 };
}
