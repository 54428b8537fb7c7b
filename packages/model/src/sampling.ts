/**
 * Choosing the next token from a row of logits: greedy (temperature 0) or
 * sampling from softmax(logits / temperature), optionally restricted to the
 * top k. Randomness comes from the caller's uniform source.
 */
import { ModelError } from "./errors.js";

export interface SamplingOptions {
  /** 0 picks the most likely token. */
  temperature: number;
  /** Keep only the k most likely tokens (0: all). */
  topK?: number;
}

export function sampleToken(logits: ArrayLike<number>, options: SamplingOptions, uniform: () => number): number {
  const { temperature } = options;
  if (!(temperature >= 0)) throw new ModelError(`temperature must be >= 0, got ${temperature}`);
  const n = logits.length;
  let best = 0;
  for (let i = 1; i < n; i++) if (logits[i]! > logits[best]!) best = i;
  if (temperature === 0) return best;
  const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => logits[b]! - logits[a]!);
  const k = options.topK && options.topK > 0 ? Math.min(options.topK, n) : n;
  const kept = order.slice(0, k);
  const weights = kept.map((i) => Math.exp((logits[i]! - logits[best]!) / temperature));
  const total = weights.reduce((a, b) => a + b, 0);
  let u = uniform() * total;
  for (let j = 0; j < kept.length; j++) {
    u -= weights[j]!;
    if (u < 0) return kept[j]!;
  }
  return kept[kept.length - 1]!;
}
