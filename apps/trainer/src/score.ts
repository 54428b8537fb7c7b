/**
 * Scoring a text file with a Hugging Face model (`ulysses-generate --model
 * DIR --score FILE`): the text encoded with the model's tokenizer, one
 * forward over the whole sequence on the trainer's ranks (any --sp and
 * --attention, so an 8K- or 128K-token text is scored sequence-parallel), and
 * a JSON report of the token ids, each token's log-probability given the ones
 * before it (the first has none: null) and the perplexity, exp of the mean
 * negative log-probability.
 */
import { HfTokenizer, readRegularFile } from "@ulysses/model";
import type { SequenceParallelKind } from "@ulysses/parallel";
import { DEFAULTS, type TrainConfig } from "./config.js";
import { TrainerError } from "./errors.js";
import { hfModelOf } from "./hf-model.js";
import { planRun } from "./plan.js";
import { RankPool } from "./rank-pool.js";

/** The largest text file --score reads (its tokens must fit max_position_embeddings anyway). */
export const MAX_SCORE_TEXT_BYTES = 64 * 1024 * 1024;

export interface ScoreOptions {
  /** A Hugging Face model directory (config.json, weights, tokenizer files), e.g. a run's hf/. */
  model: string;
  /** The text file to score (UTF-8). */
  file: string;
  sp: number;
  attention: SequenceParallelKind;
  backend: string;
  threads: number | null;
}

export interface ScoreReport {
  model: string;
  file: string;
  sp: number;
  tokens: number;
  /** The token ids, as the model's tokenizer encodes the text (with its special tokens). */
  ids: number[];
  /** logProbs[i]: log p(ids[i] | ids[0..i-1]); null for the first token. */
  logProbs: (number | null)[];
  /** Mean of -logProbs over the scored tokens. */
  meanNegativeLogProb: number;
  /** exp(meanNegativeLogProb). */
  perplexity: number;
}

/** The run configuration of a scoring job: the model, no data, no outputs, --seq the text's tokens. */
function scoreConfig(options: ScoreOptions, seq: number): TrainConfig {
  return {
    ...DEFAULTS,
    model: options.model,
    task: "text",
    sp: options.sp,
    attention: options.attention,
    backend: options.backend,
    threads: options.threads,
    seq,
    steps: 0,
    export: false,
    tileLoss: "auto",
  };
}

/** Scores `options.file`; throws a TrainerError naming the file, the model's config and the key of what is refused. */
export async function scoreFile(options: ScoreOptions): Promise<ScoreReport> {
  const hf = hfModelOf({ model: options.model, modelConfig: null, tokenizer: null })!;
  const tokenizer = HfTokenizer.load(hf.tokenizerDir);
  const bytes = readRegularFile(options.file, MAX_SCORE_TEXT_BYTES, "text to score");
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new TrainerError(`--score '${options.file}' is not UTF-8 text`);
  }
  const ids = tokenizer.encode(text);
  if (ids.length < 2) throw new TrainerError(`--score '${options.file}' encodes to ${ids.length} tokens: at least 2 are needed (the first is never scored)`);
  if (ids.length > hf.model.maxSeq)
    throw new TrainerError(
      `--score '${options.file}' encodes to ${ids.length} tokens, beyond max_position_embeddings ${hf.model.maxSeq} of '${hf.configFile}'`,
    );
  const config = scoreConfig(options, ids.length);
  // one forward: ONNX Runtime's arenas and glibc's heap kept (the trainer's fast setting; its preflight is for training's peak)
  const pool = await RankPool.start(config, null, planRun(config, { memoryArena: true }));
  try {
    const { logProbs, perplexity } = await pool.score(Int32Array.from(ids));
    const mean = -logProbs.reduce((s, v) => s + v, 0) / logProbs.length;
    return {
      model: options.model,
      file: options.file,
      sp: options.sp,
      tokens: ids.length,
      ids,
      logProbs: [null, ...logProbs],
      meanNegativeLogProb: mean,
      perplexity,
    };
  } finally {
    await pool.close();
  }
}
