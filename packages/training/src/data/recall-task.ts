/**
 * The built-in synthetic long-context task: long-range key-value recall.
 *
 * Each sequence draws a table: every one of `keys` keys gets one of `values`
 * values. A (key, value) fact is one token, the answer token of that key
 * and value; key k's answers are the `values` tokens of its group. The
 * first quarter of the sequence holds facts (each a random key's, so every
 * key is repeated through it), the last quarter holds queries (the query
 * token of a key present among the facts, labelled with that key's answer
 * token), filler tokens lie between. No value ever appears outside the facts,
 * so a query's answer can only come from attending back at least
 * `seq - 2 * floor(seq / 4) + 1` tokens (1025 at 2048). With the sequence cut
 * contiguously over P >= 2 ranks, the facts and the queries sit on different
 * ranks: only sequence parallelism's exchange brings the answer over.
 *
 * Baselines, from the construction: a uniformly drawn answer token is right
 * 1 / (keys x values) of the time; a model that sees the query (so knows the
 * key's group) but not the facts can do no better than 1 / values.
 *
 * Vocabulary: answers [0, keys x values) (key k's group is [k x values,
 * (k + 1) x values)), query tokens [keys x values, keys x values + keys),
 * fillers [keys x (values + 1), vocab), at least one.
 */
import { TrainingError } from "../errors.js";
import type { Batch } from "@ulysses/parallel";
import { IGNORE_INDEX } from "./batch.js";
import { Tensor } from "@ulysses/tensors";

export interface RecallTaskOptions {
  seq: number;
  /** Keys per table (each sequence holds a fact for every key). */
  keys: number;
  /** Values a key may hold (the best accuracy without the facts is 1 / values). */
  values: number;
  /** Vocabulary size: at least recallMinVocab(keys, values); the tokens past it are fillers. */
  vocab: number;
}

export interface RecallVocabulary {
  /** Answer tokens: [0, answers), key k's group [k x values, (k + 1) x values). */
  answers: number;
  /** Query token of key k: queryStart + k. */
  queryStart: number;
  /** Filler tokens: [fillerStart, vocab). */
  fillerStart: number;
  fillers: number;
}

/** Where the facts and the queries lie: facts [0, factEnd), queries [queryStart, seq), filler between. */
export interface RecallLayout {
  factEnd: number;
  queryStart: number;
  /** The shortest distance from a query to any fact: queryStart - (factEnd - 1). */
  minDistance: number;
}

/** The smallest vocabulary for `keys` x `values`: the answers, one query token per key, one filler. */
export function recallMinVocab(keys: number, values: number): number {
  return keys * (values + 1) + 1;
}

/** The shortest sequence the task takes (one fact and one query). */
export const RECALL_MIN_SEQ = 4;

/** Upper bound of keys x values (the answer tokens), far above what the task is for, so a vocabulary stays allocatable. */
export const RECALL_MAX_ANSWERS = 1 << 20;

/** Checks the options; throws a TrainingError naming the offending values. */
export function validateRecallTask(options: RecallTaskOptions): RecallVocabulary {
  const { seq, keys, values, vocab } = options;
  for (const [name, value] of [
    ["seq", seq],
    ["keys", keys],
    ["values", values],
    ["vocab", vocab],
  ] as const) {
    if (!Number.isSafeInteger(value) || value < 1) throw new TrainingError(`recall task: ${name} must be a positive integer, got ${String(value)}`);
  }
  if (values < 2) throw new TrainingError(`recall task: values must be at least 2 (one value tells nothing), got ${values}`);
  if (keys * values > RECALL_MAX_ANSWERS)
    throw new TrainingError(`recall task: keys ${keys} x values ${values} = ${keys * values} answer tokens is above the limit of ${RECALL_MAX_ANSWERS}`);
  if (vocab < recallMinVocab(keys, values)) {
    throw new TrainingError(
      `recall task: vocab ${vocab} is too small for ${keys} keys x ${values} values (needs at least ${recallMinVocab(keys, values)}: the answers, a query token per key, a filler)`,
    );
  }
  if (seq < RECALL_MIN_SEQ)
    throw new TrainingError(`recall task: seq ${seq} is too short (needs at least ${RECALL_MIN_SEQ}: a quarter of facts and a quarter of queries)`);
  const answers = keys * values;
  return { answers, queryStart: answers, fillerStart: answers + keys, fillers: vocab - answers - keys };
}

/** Facts in the first quarter, queries in the last. */
export function recallLayout(seq: number): RecallLayout {
  const quarter = Math.floor(seq / 4);
  const queryStart = seq - quarter;
  return { factEnd: quarter, queryStart, minDistance: queryStart - (quarter - 1) };
}

/** Accuracy a uniformly drawn answer token reaches, and the best a model that cannot see the facts reaches. */
export function recallBaselines(options: Pick<RecallTaskOptions, "keys" | "values">): { chance: number; withoutFacts: number } {
  return { chance: 1 / (options.keys * options.values), withoutFacts: 1 / options.values };
}

/** Uniform integer in [0, n) from a uniform float source. */
function below(random: () => number, n: number): number {
  return Math.min(n - 1, Math.floor(random() * n));
}

/** Generates `batch` sequences; `random` yields uniform floats in [0, 1). */
export function recallBatch(options: RecallTaskOptions, batch: number, random: () => number): Batch {
  const v = validateRecallTask(options);
  const { seq, keys, values } = options;
  const { factEnd, queryStart } = recallLayout(seq);
  const tokens = new Tensor("int32", [batch, seq]);
  const labels = new Tensor("int32", [batch, seq]);
  labels.data.fill(IGNORE_INDEX);
  const table = new Int32Array(keys);
  const present: number[] = [];
  const seen = new Uint8Array(keys);
  for (let b = 0; b < batch; b++) {
    const row = b * seq;
    for (let k = 0; k < keys; k++) table[k] = k * values + below(random, values);
    seen.fill(0);
    present.length = 0;
    for (let i = 0; i < factEnd; i++) {
      const k = below(random, keys);
      tokens.data[row + i] = table[k]!;
      if (seen[k] === 0) {
        seen[k] = 1;
        present.push(k);
      }
    }
    for (let i = factEnd; i < queryStart; i++) tokens.data[row + i] = v.fillerStart + below(random, v.fillers);
    // only keys that have a fact are asked
    for (let i = queryStart; i < seq; i++) {
      const k = present[below(random, present.length)]!;
      tokens.data[row + i] = v.queryStart + k;
      labels.data[row + i] = table[k]!;
    }
  }
  return { tokens, labels };
}

/**
 * For every labelled token of a recall batch, the distance back to the
 * nearest earlier token equal to its label (the fact it must retrieve), in
 * row order; -1 where no such token exists.
 */
export function recallDistances(batch: Batch): number[] {
  const [rows, seq] = batch.tokens.shape as unknown as [number, number];
  const distances: number[] = [];
  for (let b = 0; b < rows; b++) {
    const last = new Map<number, number>();
    for (let i = 0; i < seq; i++) {
      const label = batch.labels.data[b * seq + i]!;
      if (label !== IGNORE_INDEX) {
        const at = last.get(label);
        distances.push(at === undefined ? -1 : i - at);
      }
      last.set(batch.tokens.data[b * seq + i]!, i);
    }
  }
  return distances;
}
