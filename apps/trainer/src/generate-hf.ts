/**
 * `ulysses-generate --model DIR`: text from a Hugging Face model directory
 * (a run's hf/, or a checkpoint of a registered family: Llama, Mistral, ...).
 * config.json names the family (model_type), which gives the model's config;
 * the weights are imported into a Gpt run by this machine's kernels; the
 * prompt is encoded with the directory's tokenizer (its special tokens added
 * as the tokenizer's post-processor says, as Hugging Face's tokenizer(text)
 * does) and continued with a key-value cache, one token per step, streamed
 * as text, until an end-of-sequence token or --tokens. Everything a flag or
 * the directory can get wrong is refused before anything is written.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {
  Gpt,
  GptDecoder,
  HfTokenizer,
  MAX_CONFIG_FILE_BYTES,
  importWeights,
  modelFamilyOf,
  readJsonObject,
  sampleToken,
  type GptConfig,
  type ModelFamily,
} from "@ulysses/model";
import { createRankKernels } from "@ulysses/native-ops";
import { Rng } from "@ulysses/tensors";
import { TrainerError } from "./errors.js";

/** A refusal of the flags or of what they name (exit 2); the generate entry point makes these GenerateFlagErrors. */
export type Refuse = (message: string) => Error;

export interface HfGenerateOptions {
  model: string;
  prompt: string;
  /** Tokens to generate at most; null: min(defaultTokens, what fits after the prompt). */
  tokens: number | null;
  temperature: number;
  topK: number;
  seed: number;
}

/** What generation needs of a model directory, read and checked before anything is written. */
export interface HfModel {
  dir: string;
  configFile: string;
  config: GptConfig;
  family: ModelFamily;
  tokenizer: HfTokenizer;
  /** The ids that end generation: config.json's, generation_config.json's and the tokenizer's eos. */
  eos: Set<number>;
}

/** eos_token_id of a config file: an id or a list of ids, each inside the vocabulary. */
function eosIds(json: Readonly<Record<string, unknown>>, file: string, vocab: number): number[] {
  const value = json.eos_token_id;
  if (value === undefined || value === null) return [];
  const ids = Array.isArray(value) ? value : [value];
  for (const id of ids)
    if (!Number.isSafeInteger(id) || id < 0 || id >= vocab)
      throw new TrainerError(`config '${file}': eos_token_id ${JSON.stringify(value).slice(0, 60)} must be token ids in [0, ${vocab})`);
  return ids as number[];
}

/** Reads config.json, the family and the tokenizer of `dir`; the weights are read later (loadWeights). */
export function readHfModel(dir: string, refuse: Refuse): HfModel {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(dir);
  } catch {
    throw refuse(`--model '${dir}' does not exist (give a Hugging Face model directory, e.g. a run's hf/)`);
  }
  if (!stat.isDirectory()) throw refuse(`--model '${dir}' is not a directory (give a Hugging Face model directory, e.g. a run's hf/)`);
  const configFile = path.join(dir, "config.json");
  if (!fs.existsSync(configFile)) throw refuse(`--model '${dir}' has no config.json: it is not a Hugging Face model directory`);
  const json = readJsonObject(configFile, MAX_CONFIG_FILE_BYTES, "model config");
  const family = modelFamilyOf(json, configFile);
  const config = family.configFrom(json, configFile);
  if (!fs.existsSync(path.join(dir, "tokenizer.json")))
    throw refuse(`--model '${dir}' has no tokenizer.json: its text cannot be encoded (copy the tokenizer files of the model it came from into it)`);
  const tokenizer = HfTokenizer.load(dir);
  if (tokenizer.vocabSize > config.vocab)
    throw new TrainerError(
      `tokenizer '${path.join(dir, "tokenizer.json")}' has ids up to ${tokenizer.vocabSize - 1}, outside vocab_size ${config.vocab} of config '${configFile}'`,
    );
  const eos = new Set(eosIds(json, configFile, config.vocab));
  const generationFile = path.join(dir, "generation_config.json");
  if (fs.existsSync(generationFile))
    for (const id of eosIds(readJsonObject(generationFile, MAX_CONFIG_FILE_BYTES, "generation config"), generationFile, config.vocab)) eos.add(id);
  if (tokenizer.eos !== null) eos.add(tokenizer.eos);
  return { dir, configFile, config, family, tokenizer, eos };
}

/** The prompt's ids and the number of tokens to generate, checked against max_position_embeddings. */
export function planHfPrompt(model: HfModel, options: HfGenerateOptions, defaultTokens: number, refuse: Refuse): { ids: number[]; tokens: number } {
  const ids = model.tokenizer.encode(options.prompt, { addSpecialTokens: true });
  if (ids.length === 0) throw refuse("--prompt encodes to no tokens: give some text to continue");
  const { maxSeq } = model.config;
  if (ids.length > maxSeq)
    throw refuse(`--prompt is ${ids.length} tokens, more than the ${maxSeq} the model reads (config '${model.configFile}': max_position_embeddings ${maxSeq})`);
  const room = maxSeq - ids.length;
  if (options.tokens !== null && options.tokens > room)
    throw refuse(
      `--tokens ${options.tokens} does not fit: the prompt is ${ids.length} tokens and config '${model.configFile}': max_position_embeddings ${maxSeq} leaves room for ${room}`,
    );
  return { ids, tokens: options.tokens ?? Math.min(defaultTokens, room) };
}

/**
 * Streams the text of growing token lists: writes what decoding all of them
 * adds to the text written so far, holding back an incomplete character
 * (a byte-level token that ends mid UTF-8 sequence decodes to U+FFFD).
 */
export class TextStream {
  private ids: number[] = [];
  private written = "";

  constructor(
    private readonly tokenizer: HfTokenizer,
    private readonly write: (text: string) => void,
  ) {}

  push(id: number): void {
    this.ids.push(id);
    const text = this.tokenizer.decode(this.ids);
    if (text.endsWith("\uFFFD") || !text.startsWith(this.written)) return;
    this.flush(text);
  }

  /** Writes whatever is left (at the end). */
  end(): void {
    const text = this.tokenizer.decode(this.ids);
    this.flush(text.startsWith(this.written) ? text : this.written + text.slice(this.written.length));
  }

  private flush(text: string): void {
    if (text.length > this.written.length) this.write(text.slice(this.written.length));
    this.written = text;
  }
}

/** Generates from `model` (read by readHfModel) with the kernels of this machine, streaming text through `write`. */
export async function generateFromHf(
  model: HfModel,
  options: HfGenerateOptions,
  plan: { ids: number[]; tokens: number },
  write: (text: string) => void,
): Promise<number[]> {
  const kernels = await createRankKernels(Math.max(1, os.availableParallelism()));
  try {
    const gpt = new Gpt(model.config, { ops: kernels.ops, localAttention: kernels.attention, seed: 0 });
    importWeights(model.dir, model.config, model.family, gpt.params);
    const { config } = model;
    write(`model: ${model.dir} (${model.family.name}, ${config.layers} layers x ${config.hidden}, vocab ${config.vocab}; ${kernels.description})\n`);
    write(options.prompt);
    const decoder = new GptDecoder(gpt, kernels.attention);
    const rng = new Rng(options.seed, 7);
    const uniform = () => rng.uniform();
    const stream = new TextStream(model.tokenizer, write);
    const generated: number[] = [];
    let logits = plan.tokens > 0 ? await decoder.append(plan.ids) : null;
    while (logits !== null) {
      const token = sampleToken(logits, { temperature: options.temperature, topK: options.topK }, uniform);
      if (model.eos.has(token)) break;
      generated.push(token);
      stream.push(token);
      logits = generated.length < plan.tokens ? await decoder.append([token]) : null;
    }
    stream.end();
    write("\n");
    return generated;
  } finally {
    await kernels.release();
  }
}
