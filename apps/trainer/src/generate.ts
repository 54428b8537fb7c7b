#!/usr/bin/env node
/**
 * `ulysses-generate` (`pnpm generate` in the repository): samples from a trained model with onnxruntime-node alone.
 * The model comes from an exported model.onnx or from a checkpoint (exported
 * on the fly); `--from` takes either file or a run directory (default
 * runs/latest). Byte-level models continue `--prompt`; recall-task models
 * answer the queries of a fresh synthetic example, greedily, and show the
 * expected values. Exit codes: 0 done, 1 error, 2 bad flags.
 */
import fs from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import * as ort from "onnxruntime-node";
import { BYTE_VOCAB, IGNORE_INDEX, ParameterStore, buildOnnxModel, gptParamSpecs, loadCheckpoint, loadWeightsInto, recallBatch, sampleToken, type GptConfig } from "@ulysses/model";
import { Rng } from "@ulysses/tensors";
import { DEFAULTS, type TrainConfig } from "./config.js";
import { EXIT, isMainModule, packageVersion } from "./entry-point.js";
import { TrainerError } from "./errors.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

export interface GenerateOptions {
  from: string;
  prompt: string;
  tokens: number;
  temperature: number;
  topK: number;
  seed: number;
}

const USAGE = `Usage: ulysses-generate [--from runs/latest] [--prompt TEXT] [--tokens 200] [--temperature 0.8] [--top-k 0] [--seed 0]
                                (pnpm generate [flags] from the repository root)
  --from         a run directory, model.onnx or checkpoint.safetensors (default runs/latest)
  --prompt       text to continue (byte-level models); recall-task models answer a synthetic example instead
  -h, --help     show this text
  -V, --version  print the version
Exit codes: 0 done, 1 error, 2 bad flags.`;

const FLAGS = {
  from: { type: "string" },
  prompt: { type: "string" },
  tokens: { type: "string" },
  temperature: { type: "string" },
  "top-k": { type: "string" },
  seed: { type: "string" },
  help: { type: "boolean", short: "h" },
  version: { type: "boolean", short: "V" },
} as const;

function parseFlags(argv: readonly string[]) {
  try {
    // a leading "--" is what some runners insert before the script's own flags
    return parseArgs({ args: argv[0] === "--" ? argv.slice(1) : [...argv], options: FLAGS, strict: true, allowPositionals: false }).values;
  } catch (cause) {
    throw new TrainerError(`${(cause as Error).message} (see --help)`, { cause });
  }
}

/** Parses argv (without the node and script names): options, or "help" / "version". */
export function parseGenerateArgs(argv: readonly string[]): GenerateOptions | "help" | "version" {
  const values = parseFlags(argv);
  if (values.help) return "help";
  if (values.version) return "version";
  const number = (flag: "tokens" | "temperature" | "top-k" | "seed", fallback: number): number => {
    const raw = values[flag];
    if (raw === undefined) return fallback;
    const n = typeof raw === "string" && raw.trim() !== "" ? Number(raw) : NaN;
    if (!Number.isFinite(n)) throw new TrainerError(`--${flag} needs a number, got '${String(raw)}'`);
    return n;
  };
  return {
    from: values.from ?? path.join("runs", "latest"),
    prompt: values.prompt ?? "\n",
    tokens: number("tokens", 200),
    temperature: number("temperature", 0.8),
    topK: number("top-k", 0),
    seed: number("seed", 0),
  };
}

interface LoadedModel {
  bytes: Uint8Array;
  config: GptConfig;
  settings: TrainConfig;
  source: string;
}

/** Loads model.onnx (with the run's config.json) or a checkpoint. */
export function loadModel(from: string): LoadedModel {
  if (!fs.existsSync(from)) throw new TrainerError(`--from '${from}' does not exist (train first: pnpm train)`);
  let file = from;
  if (fs.statSync(from).isDirectory()) {
    const onnx = path.join(from, "model.onnx");
    file = fs.existsSync(onnx) ? onnx : path.join(from, "checkpoint.safetensors");
    if (!fs.existsSync(file)) throw new TrainerError(`run directory '${from}' has neither model.onnx nor checkpoint.safetensors`);
  }
  if (file.endsWith(".onnx")) {
    const configFile = path.join(path.dirname(file), "config.json");
    if (!fs.existsSync(configFile)) throw new TrainerError(`'${file}' needs the run's config.json next to it to know the task`);
    const settings = { ...DEFAULTS, ...(JSON.parse(fs.readFileSync(configFile, "utf8")) as Partial<TrainConfig>) };
    const checkpoint = path.join(path.dirname(file), "checkpoint.safetensors");
    const config = fs.existsSync(checkpoint) ? loadCheckpoint(checkpoint).config : null;
    const vocab = settings.task === "text" ? BYTE_VOCAB : settings.vocab;
    return { bytes: fs.readFileSync(file), config: config ?? { vocab, hidden: settings.hidden, heads: settings.heads, kvHeads: settings.kvHeads, layers: settings.layers, mlp: settings.mlp, mlpRatio: settings.mlpRatio, maxSeq: settings.seq, tiedHead: settings.tiedHead, attention: settings.attention }, settings, source: file };
  }
  const checkpoint = loadCheckpoint(file);
  const params = new ParameterStore(gptParamSpecs(checkpoint.config));
  loadWeightsInto(params, checkpoint);
  const settings = { ...DEFAULTS, ...((checkpoint.settings ?? {}) as Partial<TrainConfig>) };
  return { bytes: buildOnnxModel(checkpoint.config, params.values), config: checkpoint.config, settings, source: file };
}

/** Logits of the last position of `ids` (the last maxSeq tokens). */
async function nextLogits(session: ort.InferenceSession, ids: readonly number[], maxSeq: number): Promise<Float32Array> {
  const window = ids.slice(-maxSeq);
  const input = new ort.Tensor("int64", BigInt64Array.from(window, (v) => BigInt(v)), [1, window.length]);
  const logits = (await session.run({ ids: input })).logits!;
  const vocab = logits.dims[2]!;
  return (logits.data as Float32Array).subarray((window.length - 1) * vocab, window.length * vocab);
}

export async function generate(options: GenerateOptions, write: (text: string) => void): Promise<void> {
  const model = loadModel(options.from);
  const session = await ort.InferenceSession.create(model.bytes, { intraOpNumThreads: 1, logSeverityLevel: 3 });
  const rng = new Rng(options.seed, 7);
  const uniform = () => rng.uniform();
  try {
    write(`model: ${model.source} (${model.config.layers} layers x ${model.config.hidden}, vocab ${model.config.vocab})\n`);
    if (model.settings.task === "text") {
      const ids = [...Buffer.from(options.prompt, "utf8")];
      const out: number[] = [];
      for (let i = 0; i < options.tokens; i++) {
        const token = sampleToken(await nextLogits(session, ids, model.config.maxSeq), { temperature: options.temperature, topK: options.topK }, uniform);
        ids.push(token);
        out.push(token);
      }
      write(`${options.prompt}${Buffer.from(out).toString("utf8")}\n`);
      return;
    }
    const s = model.settings;
    const example = recallBatch({ vocab: s.vocab, seq: s.seq, pairs: s.pairs, queries: s.queries }, 1, uniform);
    const tokens = [...example.tokens.data];
    let correct = 0;
    let asked = 0;
    for (let i = 0; i < tokens.length; i++) {
      const answer = example.labels.data[i]!;
      if (answer === IGNORE_INDEX) continue;
      const predicted = sampleToken(await nextLogits(session, tokens.slice(0, i + 1), model.config.maxSeq), { temperature: 0 }, uniform);
      const keyAt = tokens.indexOf(tokens[i]!);
      write(`query: key ${tokens[i]} (stored at position ${keyAt} of ${tokens.length}) -> predicted value ${predicted}, expected ${answer} ${predicted === answer ? "ok" : "wrong"}\n`);
      asked++;
      if (predicted === answer) correct++;
    }
    write(`recall: ${correct}/${asked} correct (chance ${(100 / Math.floor(s.vocab / 4)).toFixed(1)}%)\n`);
  } finally {
    await session.release();
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
    process.stderr.write(`error: ${(error as Error).message}\n`);
    return EXIT.badFlags;
  }
  try {
    await generate(options, (text) => process.stdout.write(text));
    return EXIT.done;
  } catch (error) {
    process.stderr.write(`error: ${(error as Error).message}\n`);
    return EXIT.error;
  }
}

if (isMainModule(import.meta.url)) {
  main(process.argv.slice(2)).then((code) => process.exit(code));
}
