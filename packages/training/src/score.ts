/**
 * Scoring a text: each token's log-probability under the model given the
 * tokens before it, on one device or sequence-parallel, with the same
 * forward as training and the LM head a tile of rows at a time (so
 * [tokens, vocab] logits never exist at once).
 *
 * Where a rank's rows sit in the sequence (a contiguous or zigzag shard,
 * whatever the scheme) is the model's business: the batch's labels are cut
 * exactly as its tokens are, so the labels given are the positions
 * themselves (label i at input i) and each rank reads back, with its rows,
 * which positions they are. Each rank writes its rows' log-probabilities at
 * their positions into a zeroed vector and one allReduce (sum) over the
 * model's group assembles the whole on every rank. That group must hold one
 * replica (no data parallelism): replicas would each add their copy.
 */
import type { TrainingOps } from "@ulysses/kernels";
import { Tensor } from "@ulysses/tensors";
import { IGNORE_INDEX } from "./data/batch.js";
import { TrainingError } from "./errors.js";
import type { TrainModel } from "./loss.js";

export interface TokenScores {
  /** logProbs[i]: log p(tokens[i + 1] | tokens[0..i]), for i in [0, tokens.length - 1). */
  logProbs: Float64Array;
  /** exp(-mean(logProbs)). */
  perplexity: number;
}

/**
 * Log-probabilities of `tokens` (one sequence of the model's full length;
 * under sequence parallelism every rank of the group passes the same tokens).
 * `tileRows`: rows of logits per tile (default 256).
 */
export async function scoreTokens(model: TrainModel, ops: TrainingOps, tokens: Int32Array, tileRows = 256): Promise<TokenScores> {
  const n = tokens.length;
  if (n < 2) throw new TrainingError(`scoreTokens: a text of ${n} tokens has nothing to score (at least 2)`);
  if (!Number.isSafeInteger(tileRows) || tileRows < 1) throw new TrainingError(`scoreTokens: tileRows must be a positive integer, got ${tileRows}`);
  // labels carry positions: label i at input i (the last input predicts nothing)
  const positions = new Int32Array(n);
  for (let i = 0; i < n; i++) positions[i] = i < n - 1 ? i : IGNORE_INDEX;
  const batch = { tokens: new Tensor("int32", [1, n], tokens.slice()), labels: new Tensor("int32", [1, n], positions) };
  const { context, labels } = await model.forwardBatch(batch, { logits: false });
  const scores = new Float64Array(n - 1);
  try {
    const h = context.hFinal!;
    const [rows, hidden] = h.shape as [number, number];
    const head = model.lmHead();
    for (let from = 0; from < rows; from += tileRows) {
      const to = Math.min(rows, from + tileRows);
      const logits = await head.forward(new Tensor("float32", [to - from, hidden], h.data.subarray(from * hidden, to * hidden)));
      // the tile's next tokens as labels: each row's cross-entropy term is -log p(its next token)
      const next = new Tensor("int32", [to - from]);
      for (let r = from; r < to; r++) next.data[r - from] = labels.data[r] === IGNORE_INDEX ? IGNORE_INDEX : tokens[labels.data[r]! + 1]!;
      const { rowLosses } = await ops.crossEntropyForward(logits, next, IGNORE_INDEX);
      ops.release?.(logits);
      for (let r = from; r < to; r++) if (labels.data[r] !== IGNORE_INDEX) scores[labels.data[r]!] = -rowLosses[r - from]!;
    }
  } finally {
    model.release(context);
  }
  const group = model.gradientGroup;
  if (group !== null && group.size > 1) scores.set((await group.allReduce(scores, { op: "sum" })).data as Float64Array);
  let total = 0;
  for (const s of scores) total += s;
  return { logProbs: scores, perplexity: Math.exp(-total / scores.length) };
}
