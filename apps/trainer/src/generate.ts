/**
 * `pnpm generate`: samples from a trained model with onnxruntime-node alone.
 * The model comes from an exported model.onnx or from a checkpoint (exported
 * on the fly); `--from` takes either file or a run directory (default
 * runs/latest). Byte-level models continue `--prompt`; recall-task models
 * answer the queries of a fresh synthetic example, greedily, and show the
 * expected values.
 */
import fs from "node:fs";
import path from "node:path";
import * as ort from "onnxruntime-node";
import { BYTE_VOCAB, IGNORE_INDEX, ParameterStore, buildOnnxModel, gptParamSpecs, loadCheckpoint, loadWeightsInto, recallBatch, sampleToken, type GptConfig } from "@ulysses/model";
import { Rng } from "@ulysses/tensors";
import { DEFAULTS, type TrainConfig } from "./config.js";
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

const USAGE = `Usage: pnpm generate [--from runs/latest] [--prompt TEXT] [--tokens 200] [--temperature 0.8] [--top-k 0] [--seed 0]
  --from   a run directory, model.onnx or checkpoint.safetensors (default runs/latest)
  --prompt text to continue (byte-level models); recall-task models answer a synthetic example instead`;

export function parseGenerateArgs(argv: readonly string[]): GenerateOptions | null {
  const options: GenerateOptions = { from: path.join("runs", "latest"), prompt: "\n", tokens: 200, temperature: 0.8, topK: 0, seed: 0 };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--help" || arg === "-h") return null;
    if (arg === "--") continue;
    const value = argv[++i];
    if (value === undefined) throw new TrainerError(`${arg} needs a value (see --help)`);
    const number = () => {
      const n = Number(value);
      if (!Number.isFinite(n)) throw new TrainerError(`${arg} needs a number, got '${value}'`);
      return n;
    };
    if (arg === "--from") options.from = value;
    else if (arg === "--prompt") options.prompt = value;
    else if (arg === "--tokens") options.tokens = number();
    else if (arg === "--temperature") options.temperature = number();
    else if (arg === "--top-k") options.topK = number();
    else if (arg === "--seed") options.seed = number();
    else throw new TrainerError(`unknown flag '${arg}' (see --help)`);
  }
  return options;
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

async function main(argv: readonly string[]): Promise<number> {
  if (process.env.INIT_CWD) process.chdir(process.env.INIT_CWD);
  try {
    const options = parseGenerateArgs(argv);
    if (options === null) {
      process.stdout.write(`${USAGE}\n`);
      return 0;
    }
    await generate(options, (text) => process.stdout.write(text));
    return 0;
  } catch (error) {
    process.stderr.write(`error: ${(error as Error).message}\n`);
    return 1;
  }
}

if (process.argv[1]?.endsWith("generate.ts") || process.argv[1]?.endsWith("generate.js")) {
  main(process.argv.slice(2)).then((code) => process.exit(code));
}
