#!/usr/bin/env node
/**
 * `ulysses-generate` (`pnpm generate` in the repository): samples from a trained model with onnxruntime-node alone.
 * The model comes from an exported model.onnx or from a checkpoint (exported
 * on the fly); `--from` takes either file or a run directory (default
 * runs/latest). `--model DIR` reads a Hugging Face model directory instead (a
 * run's hf/, or a Llama-family checkpoint) with its tokenizer and decodes
 * with a key-value cache (generate-hf.ts). Byte-level models continue `--prompt`; recall-task models
 * answer the queries of a fresh synthetic example, greedily (one pass over
 * the example: the queries never see an answer), and show the expected
 * answers. Exit codes: 0 done, 1 error, 2 bad flags.
 */
import buffer from "node:buffer";
import fs from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import {
  OnnxLM,
  ParameterStore,
  buildOnnxModel,
  gptParamSpecs,
  modelTypes,
  readJsonObject,
  sampleToken,
  validateGptConfig,
  type GptConfig,
} from "@ulysses/model";
import {
  BYTE_VOCAB,
  errnoText,
  IGNORE_INDEX,
  loadCheckpoint,
  loadWeightsInto,
  recallBaselines,
  recallBatch,
  recallDistances,
  validateRecallTask,
  MAX_CONFIG_FILE_BYTES,
  fileKind,
  readRegularFile,
} from "@ulysses/training";
import { Rng } from "@ulysses/tensors";
import { DECIMAL } from "./args.js";
import { DEFAULTS } from "./config.js";
import { EXIT, isMainModule, packageVersion, refusalNote } from "./entry-point.js";
import { TrainerError } from "./errors.js";
import { generateFromHf, planHfPrompt, readHfModel } from "./generate-hf.js";
import { DEFAULT_TOKENS, GenerateFlagError, parseGenerateArgs, USAGE, type GenerateOptions } from "./generate-args.js";
import { scoreFile } from "./score.js";

export { GenerateFlagError, MAX_TOKENS, parseGenerateArgs, type GenerateOptions } from "./generate-args.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

/** What generate needs of the run's settings (plain data, from config.json or the checkpoint). */
interface TaskSettings {
  task: "recall" | "text";
  seq: number;
  keys: number;
  values: number;
}

interface LoadedModel {
  bytes: Uint8Array;
  config: GptConfig;
  settings: TaskSettings;
  source: string;
}

/** The task settings of a run, from an untrusted record (config.json or a checkpoint's settings); `where` names the file. */
function taskSettings(record: unknown, model: GptConfig, where: string): TaskSettings {
  const r = record !== null && typeof record === "object" && !Array.isArray(record) ? (record as Record<string, unknown>) : {};
  const task = r.task === "recall" || r.task === "text" ? r.task : r.task === undefined ? (model.vocab === BYTE_VOCAB ? "text" : "recall") : null;
  if (task === null) throw new TrainerError(`${where}: task must be recall or text, got ${JSON.stringify(r.task)?.slice(0, 40)}`);
  const int = (key: "seq" | "keys" | "values", fallback: number): number => {
    const value = r[key] ?? fallback;
    if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1)
      throw new TrainerError(`${where}: ${key} must be a positive integer, got ${JSON.stringify(value)?.slice(0, 40)}`);
    return value;
  };
  const settings = { task, seq: int("seq", model.maxSeq), keys: int("keys", DEFAULTS.keys), values: int("values", DEFAULTS.values) } as TaskSettings;
  if (task === "text") {
    if (model.vocab !== BYTE_VOCAB)
      throw new TrainerError(`${where}: a text-task model reads bytes (vocab ${BYTE_VOCAB}), but this model has vocab ${model.vocab}`);
  } else {
    if (settings.seq > model.maxSeq) throw new TrainerError(`${where}: recall sequences of ${settings.seq} tokens exceed the model's maxSeq ${model.maxSeq}`);
    try {
      validateRecallTask({ seq: settings.seq, keys: settings.keys, values: settings.values, vocab: model.vocab });
    } catch (cause) {
      throw new TrainerError(`${where}: ${(cause as Error).message}`, { cause });
    }
  }
  return settings;
}

/** The largest model.onnx read (a Buffer's limit): the file is read whole, as ONNX Runtime takes it. */
const MAX_MODEL_FILE_BYTES = buffer.constants.MAX_LENGTH;

/** Loads model.onnx (with the run's config.json) or a checkpoint; every problem names its file. */
export async function loadModel(from: string): Promise<LoadedModel> {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(from);
  } catch (cause) {
    const code = (cause as NodeJS.ErrnoException).code;
    throw new TrainerError(code === "ENOENT" ? `--from '${from}' does not exist (train first: pnpm train)` : `--from '${from}': ${errnoText(cause)}`, {
      cause,
    });
  }
  let file = from;
  if (stat.isDirectory()) {
    const onnx = path.join(from, "model.onnx");
    file = fs.existsSync(onnx) ? onnx : path.join(from, "checkpoint.safetensors");
    if (!fs.existsSync(file)) throw new TrainerError(`run directory '${from}' has neither model.onnx nor checkpoint.safetensors`);
  }
  // a FIFO or a device would block the open or never end: only regular files are read
  const kind = fileKind(fs.statSync(file));
  if (kind !== "a regular file") throw new TrainerError(`--from '${file}' is ${kind}; give a run directory, model.onnx or checkpoint.safetensors`);
  if (file.endsWith(".onnx")) {
    const configFile = path.join(path.dirname(file), "config.json");
    if (!fs.existsSync(configFile)) throw new TrainerError(`'${file}' needs the run's config.json next to it to know the task`);
    const json = readJsonObject(configFile, MAX_CONFIG_FILE_BYTES, "run config");
    const c = { ...DEFAULTS, ...json } as Record<string, unknown>;
    const checkpoint = path.join(path.dirname(file), "checkpoint.safetensors");
    let config: GptConfig;
    if (fs.existsSync(checkpoint)) {
      config = loadCheckpoint(checkpoint).config;
    } else {
      config = {
        vocab: c.task === "text" ? BYTE_VOCAB : c.vocab,
        hidden: c.hidden,
        heads: c.heads,
        kvHeads: c.kvHeads,
        layers: c.layers,
        mlp: c.mlp,
        mlpRatio: c.mlpRatio,
        maxSeq: c.seq,
        tiedHead: c.tiedHead,
      } as GptConfig;
      try {
        validateGptConfig(config);
      } catch (cause) {
        throw new TrainerError(`run config '${configFile}': ${(cause as Error).message}`, { cause });
      }
    }
    return {
      bytes: readRegularFile(file, MAX_MODEL_FILE_BYTES, "model file"),
      config,
      settings: taskSettings(json, config, `run config '${configFile}'`),
      source: file,
    };
  }
  const checkpoint = loadCheckpoint(file);
  const params = new ParameterStore(gptParamSpecs(checkpoint.config));
  loadWeightsInto(params, checkpoint);
  const settings = taskSettings(checkpoint.settings, checkpoint.config, `checkpoint '${file}'`);
  return { bytes: await buildOnnxModel(checkpoint.config, params.values), config: checkpoint.config, settings, source: file };
}

/** The sampling flags, checked before any model is read. */
function checkSampling(options: GenerateOptions): void {
  if (options.tokens !== null && (!Number.isSafeInteger(options.tokens) || options.tokens < 0))
    throw new GenerateFlagError(`--tokens must be an integer >= 0, got ${options.tokens}`);
  if (!(options.temperature >= 0) || !Number.isFinite(options.temperature))
    throw new GenerateFlagError(`--temperature must be a finite number >= 0, got ${options.temperature}`);
  if (!Number.isSafeInteger(options.topK) || options.topK < 0) throw new GenerateFlagError(`--top-k must be an integer >= 0, got ${options.topK}`);
  if (!Number.isSafeInteger(options.seed) || options.seed < 0) throw new GenerateFlagError(`--seed must be an integer >= 0, got ${options.seed}`);
}

const refuse = (message: string) => new GenerateFlagError(message);

export async function generate(options: GenerateOptions, write: (text: string) => void): Promise<void> {
  checkSampling(options);
  if (options.score !== undefined && options.score !== null) {
    const report = await scoreFile({
      model: options.model!,
      file: options.score,
      sp: options.sp ?? 1,
      attention: options.attention ?? "ulysses",
      backend: options.backend ?? "threads",
      threads: null,
    });
    write(`${JSON.stringify(report)}\n`);
    return;
  }
  if (options.model !== undefined && options.model !== null) {
    const model = readHfModel(options.model, refuse);
    const hfOptions = { ...options, model: options.model };
    await generateFromHf(model, hfOptions, planHfPrompt(model, hfOptions, DEFAULT_TOKENS, refuse), write);
    return;
  }
  const model = await loadModel(options.from);
  const { maxSeq, vocab } = model.config;
  // flag values that depend on the model: checked before anything is generated
  const prompt = [...Buffer.from(options.prompt, "utf8")];
  let tokens = 0;
  if (model.settings.task === "text") {
    if (prompt.length === 0) throw new GenerateFlagError("--prompt is empty: a byte-level model continues at least one byte (the default prompt is a newline)");
    const outside = prompt.findIndex((b) => b >= vocab);
    if (outside >= 0) throw new GenerateFlagError(`--prompt byte ${prompt[outside]} at offset ${outside} is outside the model's vocabulary of ${vocab} tokens`);
    if (prompt.length > maxSeq) throw new GenerateFlagError(`--prompt has ${prompt.length} bytes, more than the ${maxSeq} tokens the model reads (maxSeq)`);
    const room = maxSeq - prompt.length;
    if (options.tokens !== null && options.tokens > room) {
      throw new GenerateFlagError(
        `--tokens ${options.tokens} does not fit: the model reads at most ${maxSeq} tokens (maxSeq) and the prompt has ${prompt.length}, so at most ${room} can follow`,
      );
    }
    tokens = options.tokens ?? Math.min(DEFAULT_TOKENS, room);
  }
  const lm = await OnnxLM.create(model.bytes, model.config, model.source);
  const rng = new Rng(options.seed, 7);
  const uniform = () => rng.uniform();
  try {
    write(`model: ${model.source} (${model.config.layers} layers x ${model.config.hidden}, vocab ${model.config.vocab})\n`);
    if (model.settings.task === "text") {
      // streamed: each byte is written as it is generated (UTF-8 sequences once complete)
      const decoder = new TextDecoder("utf-8");
      write(options.prompt);
      for await (const token of lm.generate(prompt, tokens, { temperature: options.temperature, topK: options.topK }, uniform)) {
        const text = decoder.decode(Uint8Array.of(token), { stream: true });
        if (text !== "") write(text);
      }
      write(`${decoder.decode()}\n`);
      return;
    }
    const s = model.settings;
    const example = recallBatch({ seq: s.seq, keys: s.keys, values: s.values, vocab }, 1, uniform);
    const ids = [...example.tokens.data];
    // causal: position i's logits see tokens [0, i] only, and no answer is ever an input, so one pass answers every query
    const logits = await lm.logits(ids);
    const distances = recallDistances(example);
    let correct = 0;
    let asked = 0;
    const shown = new Set<number>();
    for (let i = 0; i < ids.length; i++) {
      const answer = example.labels.data[i]!;
      if (answer === IGNORE_INDEX) continue;
      const predicted = sampleToken(logits.subarray(i * vocab, (i + 1) * vocab), { temperature: 0 }, uniform);
      // one line per key: its first query
      if (!shown.has(ids[i]!)) {
        shown.add(ids[i]!);
        const key = ids[i]! - s.keys * s.values;
        // answer token t is key floor(t / values)'s value t % values
        const said = Math.floor(predicted / s.values) === key ? `value ${predicted % s.values}` : `token ${predicted} (not one of key ${key}'s answers)`;
        write(
          `query at ${i}: key ${key} -> predicted ${said}, expected value ${answer % s.values} (its fact ${distances[asked]} tokens back) ${predicted === answer ? "ok" : "wrong"}\n`,
        );
      }
      asked++;
      if (predicted === answer) correct++;
    }
    const { chance, withoutFacts } = recallBaselines(s);
    write(
      `recall: ${correct}/${asked} correct (${((100 * correct) / asked).toFixed(1)}%; chance ${(100 * chance).toFixed(1)}%, ` +
        `best without seeing the facts ${(100 * withoutFacts).toFixed(1)}%)\n`,
    );
  } finally {
    await lm.release();
  }
}

export async function main(argv: readonly string[]): Promise<number> {
  if (process.env.INIT_CWD) process.chdir(process.env.INIT_CWD);
  let options: GenerateOptions;
  try {
    const parsed = parseGenerateArgs(argv);
    if (parsed === "help" || parsed === "version") {
      process.stdout.write(`${parsed === "help" ? USAGE : packageVersion()}\n`);
      return EXIT.done;
    }
    options = parsed;
  } catch (error) {
    process.stderr.write(`error: ${(error as Error).message}\n${refusalNote()}`);
    return EXIT.badFlags;
  }
  try {
    await generate(options, (text) => process.stdout.write(text));
    return EXIT.done;
  } catch (error) {
    process.stderr.write(`error: ${(error as Error).message}\n${error instanceof GenerateFlagError ? refusalNote() : ""}`);
    return error instanceof GenerateFlagError ? EXIT.badFlags : EXIT.error;
  }
}

if (isMainModule(import.meta.url)) {
  main(process.argv.slice(2)).then((code) => process.exit(code));
}
