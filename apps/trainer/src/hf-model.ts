/**
 * The Hugging Face model of a run: `--model DIR` (a model directory to
 * fine-tune: config.json, its weights, its tokenizer) or `--model-config
 * FILE` (a config.json: a model of that shape from random weights, with the
 * tokenizer of `--tokenizer DIR`). The config is read once per process
 * (bounded), its family found by `model_type`, and mapped onto the model's
 * config by the family, which reads or refuses every field that changes the
 * math. Every message names the file and the key.
 */
import fs from "node:fs";
import path from "node:path";
import { HfTokenizer, MAX_CONFIG_FILE_BYTES, modelFamilyOf, readJsonObject, type GptConfig, type ModelFamily } from "@ulysses/model";
import type { TrainConfig } from "./config.js";
import { TrainerError } from "./errors.js";

export interface HfModel {
  /** The config.json read. */
  configFile: string;
  /** Its object, as read (the hf/ export writes it back). */
  json: Readonly<Record<string, unknown>>;
  family: ModelFamily;
  /** The model it describes; maxSeq is its max_position_embeddings. */
  model: GptConfig;
  /** The directory whose weights the ranks import (--model), or null (--model-config: random weights, seeded by --seed). */
  weightsDir: string | null;
  /** The directory of tokenizer.json and tokenizer_config.json (--tokenizer, else --model's). */
  tokenizerDir: string;
}

const read = new Map<string, HfModel>();

/** Whether the run trains a Hugging Face model (--model or --model-config). */
export function usesHfModel(config: Pick<TrainConfig, "model" | "modelConfig">): boolean {
  return config.model !== null || config.modelConfig !== null;
}

/** The flags' own problems: which of --model, --model-config and --tokenizer go together. */
export function hfFlagProblems(config: TrainConfig): string[] {
  const problems: string[] = [];
  for (const key of ["model", "modelConfig", "tokenizer"] as const) {
    const value = config[key];
    if (value !== null && (typeof value !== "string" || value.trim() === ""))
      problems.push(`--${key === "modelConfig" ? "model-config" : key} needs a path, got ${JSON.stringify(value)}`);
  }
  if (config.model !== null && config.modelConfig !== null)
    problems.push(
      `--model '${config.model}' and --model-config '${config.modelConfig}': give one (--model fine-tunes a model directory, --model-config starts one of that shape from random weights)`,
    );
  if (config.modelConfig !== null && config.tokenizer === null)
    problems.push(`--model-config '${config.modelConfig}' needs --tokenizer DIR (a directory with tokenizer.json and tokenizer_config.json)`);
  if (config.tokenizer !== null && !usesHfModel(config))
    problems.push(`--tokenizer '${config.tokenizer}' is for a Hugging Face model (--model or --model-config); the built-in GPT reads bytes`);
  return problems;
}

function directoryProblem(flag: string, dir: string, needs: string): string | null {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(dir);
  } catch {
    return `${flag} '${dir}' does not exist (${needs})`;
  }
  return stat.isDirectory() ? null : `${flag} '${dir}' is not a directory (${needs})`;
}

/**
 * The run's Hugging Face model, or null for the built-in GPT. Throws a
 * TrainerError naming the flag, the file and the key of the first problem.
 */
export function hfModelOf(config: Pick<TrainConfig, "model" | "modelConfig" | "tokenizer">): HfModel | null {
  if (!usesHfModel(config)) return null;
  const key = `${config.model}\0${config.modelConfig}\0${config.tokenizer}`;
  const known = read.get(key);
  if (known !== undefined) return known;
  let configFile: string;
  if (config.model !== null) {
    const problem = directoryProblem("--model", config.model, "a Hugging Face model directory: config.json, model.safetensors, tokenizer.json");
    if (problem !== null) throw new TrainerError(problem);
    configFile = path.join(config.model, "config.json");
  } else configFile = config.modelConfig!;
  const tokenizerDir = config.tokenizer ?? config.model!;
  const problem = directoryProblem(config.tokenizer === null ? "--model" : "--tokenizer", tokenizerDir, "tokenizer.json and tokenizer_config.json");
  if (problem !== null) throw new TrainerError(problem);
  let json: Record<string, unknown>;
  try {
    json = readJsonObject(configFile, MAX_CONFIG_FILE_BYTES, "model config");
  } catch (cause) {
    throw new TrainerError(`${config.model !== null ? "--model" : "--model-config"}: ${(cause as Error).message}`, { cause });
  }
  const family = modelFamilyOf(json, configFile);
  const model = family.configFrom(json, configFile);
  const hf: HfModel = { configFile, json, family, model, weightsDir: config.model, tokenizerDir };
  read.set(key, hf);
  return hf;
}

const tokenizers = new Map<string, HfTokenizer>();

/**
 * The run's tokenizer (tokenizer.json and tokenizer_config.json of the model's
 * tokenizer directory), loaded once per process. Throws a TrainerError when
 * the run has no Hugging Face model, or when the tokenizer's ids do not all
 * fit the model's vocabulary (naming both files).
 */
export function tokenizerOf(config: Pick<TrainConfig, "model" | "modelConfig" | "tokenizer">): HfTokenizer {
  const hf = hfModelOf(config);
  if (hf === null) throw new TrainerError("tokenizerOf: the run has no Hugging Face model (--model or --model-config)");
  let tokenizer = tokenizers.get(hf.tokenizerDir);
  if (tokenizer === undefined) {
    tokenizer = HfTokenizer.load(hf.tokenizerDir);
    tokenizers.set(hf.tokenizerDir, tokenizer);
  }
  if (tokenizer.vocabSize > hf.model.vocab)
    throw new TrainerError(
      `the tokenizer of '${hf.tokenizerDir}' has ${tokenizer.vocabSize} ids, more than the ${hf.model.vocab} rows of vocab_size in '${hf.configFile}'`,
    );
  return tokenizer;
}
