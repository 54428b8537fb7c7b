/**
 * The built-in synthetic long-context task: key-value recall. Each sequence
 * holds `pairs` (key, value) token pairs spread evenly over the whole
 * sequence (one pair at a random place in each of `pairs` equal slots, filler
 * tokens elsewhere), then `queries` triples (QUERY, key, value) at the end.
 * Only the query's key position has a label (its value); every other label is
 * ignored. A key appears once in the body, so the answer can only come from
 * attending back to wherever that pair sits, possibly on another rank.
 *
 * Vocabulary (vocab V >= 16): values [0, V/4), keys [V/4, 3V/4), filler
 * [3V/4, V-1), QUERY = V-1. Chance accuracy is 1 / (V/4).
 */
import { TrainingError } from "../errors.js";
import type { Batch } from "@ulysses/parallel";
import { IGNORE_INDEX } from "./batch.js";
import { Tensor } from "@ulysses/tensors";

export interface RecallTaskOptions {
  vocab: number;
  seq: number;
  pairs: number;
  queries: number;
}

export interface RecallVocabulary {
  values: number;
  valueStart: number;
  keys: number;
  keyStart: number;
  fillers: number;
  fillerStart: number;
  query: number;
}

export function recallVocabulary(vocab: number): RecallVocabulary {
  if (!Number.isInteger(vocab) || vocab < 16) throw new TrainingError(`the recall task needs a vocabulary of at least 16 tokens, got ${vocab}`);
  const values = Math.floor(vocab / 4);
  const keys = Math.floor((3 * vocab) / 4) - values;
  const fillerStart = values + keys;
  return { values, valueStart: 0, keys, keyStart: values, fillers: vocab - 1 - fillerStart, fillerStart, query: vocab - 1 };
}

/** Minimum sequence length for `pairs` and `queries` (two tokens per slot, three per query). */
export function recallMinSeq(pairs: number, queries: number): number {
  return 2 * pairs + 3 * queries;
}

/** Checks the options; throws a TrainingError naming the offending values. */
export function validateRecallTask(options: RecallTaskOptions): RecallVocabulary {
  const v = recallVocabulary(options.vocab);
  const { seq, pairs, queries } = options;
  if (!Number.isInteger(pairs) || pairs < 1 || pairs > v.keys)
    throw new TrainingError(`recall task: pairs must be in [1, ${v.keys}] for vocab ${options.vocab}, got ${pairs}`);
  if (!Number.isInteger(queries) || queries < 1 || queries > pairs)
    throw new TrainingError(`recall task: queries must be in [1, pairs = ${pairs}], got ${queries}`);
  if (seq < recallMinSeq(pairs, queries)) {
    throw new TrainingError(`recall task: seq ${seq} is too short for ${pairs} pairs and ${queries} queries (needs at least ${recallMinSeq(pairs, queries)})`);
  }
  return v;
}

/** Uniform integer in [0, n) from a uniform float source. */
function below(random: () => number, n: number): number {
  return Math.min(n - 1, Math.floor(random() * n));
}

/** Generates `batch` sequences; `random` yields uniform floats in [0, 1). */
export function recallBatch(options: RecallTaskOptions, batch: number, random: () => number): Batch {
  const v = validateRecallTask(options);
  const { seq, pairs, queries } = options;
  const tokens = new Tensor("int32", [batch, seq]);
  const labels = new Tensor("int32", [batch, seq]);
  labels.data.fill(IGNORE_INDEX);
  const body = seq - 3 * queries;
  const slot = Math.floor(body / pairs);
  for (let b = 0; b < batch; b++) {
    const row = b * seq;
    for (let i = 0; i < body; i++) tokens.data[row + i] = v.fillerStart + below(random, v.fillers);
    // distinct keys: partial Fisher-Yates over the key range
    const keyPool = Array.from({ length: v.keys }, (_, i) => v.keyStart + i);
    const keys: number[] = [];
    const values: number[] = [];
    for (let p = 0; p < pairs; p++) {
      const j = p + below(random, v.keys - p);
      [keyPool[p], keyPool[j]] = [keyPool[j]!, keyPool[p]!];
      keys.push(keyPool[p]!);
      values.push(v.valueStart + below(random, v.values));
      const at = p * slot + below(random, slot - 1);
      tokens.data[row + at] = keys[p]!;
      tokens.data[row + at + 1] = values[p]!;
    }
    // distinct queried pairs
    const order = Array.from({ length: pairs }, (_, i) => i);
    for (let q = 0; q < queries; q++) {
      const j = q + below(random, pairs - q);
      [order[q], order[j]] = [order[j]!, order[q]!];
      const p = order[q]!;
      const at = row + body + 3 * q;
      tokens.data[at] = v.query;
      tokens.data[at + 1] = keys[p]!;
      tokens.data[at + 2] = values[p]!;
      labels.data[at + 1] = values[p]!;
    }
  }
  return { tokens, labels };
}
