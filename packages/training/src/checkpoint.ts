/**
 * Checkpoints in safetensors: every parameter under its own name, the AdamW
 * moments as two flat vectors (`optimizer.m`, `optimizer.v`, the layout of the
 * flat parameter vector, so they load whatever the ZeRO sharding), and in the
 * metadata the step, the GPT config, the data RNG state and a flat record of
 * the caller's settings (JSON strings). The settings are plain data (numbers,
 * strings, booleans): a copy of the run's hyperparameters for people and for
 * defaults on resume; callers keep code and paths (backend modules, output
 * and data files) out of them, and nothing that reads a checkpoint may follow
 * such a value. Saving is collective under ZeRO (the moments' slices are
 * broadcast part by part to the writer); only the rank given `write: true`
 * touches the file, atomically. restoreCheckpointFile reads into a trainer
 * only what its rank holds: the weights and its slice of each moment.
 */
import { copyRopeScaling } from "@ulysses/kernels";
import type { Tensor } from "@ulysses/tensors";
import { TrainingError } from "./errors.js";
import {
  gptParamSpecs,
  readSafetensors,
  readSafetensorsHeader,
  streamedOrder,
  writeSafetensorsStreamedAsync,
  type GptConfig,
  type StreamedTensor,
  type ParameterStore,
  type ParamSpec,
  type SafetensorsHeader,
} from "@ulysses/model";
import type { Trainer } from "./train-step.js";

export const CHECKPOINT_FORMAT = "ulysses-ts-checkpoint/1";

export interface CheckpointExtras {
  /** Any JSON-serialisable state (the data RNG's getState()). */
  rng?: unknown;
  /** The data stream's position (a document loader's state(); plain JSON). */
  data?: unknown;
  /**
   * The run's settings as a flat record of plain values (no nested objects):
   * hyperparameters only, never code or paths (see the top of this file).
   */
  settings?: CheckpointSettings;
}

/** Plain-data settings stored in a checkpoint's metadata. */
export type CheckpointSettings = Readonly<Record<string, string | number | boolean | null>>;

function checkSettings(file: string, settings: CheckpointSettings): void {
  for (const [key, value] of Object.entries(settings)) {
    const ok = value === null || typeof value === "string" || typeof value === "boolean" || (typeof value === "number" && Number.isFinite(value));
    if (!ok)
      throw new TrainingError(`checkpoint '${file}': setting '${key}' must be a plain value (string, finite number, boolean or null), got ${typeof value}`);
  }
}

/** What a checkpoint's header says (inspectCheckpoint): everything but the tensors. */
export interface CheckpointInfo {
  file: string;
  step: number;
  config: GptConfig;
  rng: unknown;
  /** The data stream's position, or undefined when none was saved. */
  data: unknown;
  settings: unknown;
}

export interface LoadedCheckpoint extends CheckpointInfo {
  weights: Map<string, Tensor>;
  m: Float32Array | null;
  v: Float32Array | null;
}

/**
 * Collective under ZeRO 1 to 3 (every rank of the trainer's group calls it);
 * the rank with `write` writes `file`, atomically. The file is streamed: the
 * weights from the model's own storage (ZeRO-3: in parts as the ranks
 * holding them broadcast them, Trainer.weightParts), each moment in parts
 * likewise (Trainer.momentParts), so no rank gathers a whole moment or,
 * sharded, a whole model.
 */
export async function saveCheckpoint(file: string, trainer: Trainer, extras: CheckpointExtras, write: boolean): Promise<void> {
  const { params, config } = trainer.model;
  const tensors: StreamedTensor[] = params.specs.map((spec) => ({ name: spec.name, dtype: "float32", shape: spec.shape }));
  for (const name of MOMENTS) tensors.push({ name, dtype: "float32", shape: [params.size] });
  const partsOf = (t: StreamedTensor) =>
    t.name === "optimizer.m" ? trainer.momentParts("m") : t.name === "optimizer.v" ? trainer.momentParts("v") : trainer.weightParts(t.name);
  if (!write) {
    // the writer draws every tensor's parts in the file's order: the same collectives in the same order
    for (const t of streamedOrder(tensors)) for await (const _ of partsOf(t));
    return;
  }
  const metadata: Record<string, string> = {
    format: CHECKPOINT_FORMAT,
    step: String(trainer.step),
    config: JSON.stringify(config),
  };
  if (extras.rng !== undefined) metadata.rng = JSON.stringify(extras.rng);
  if (extras.data !== undefined) metadata.data = JSON.stringify(extras.data);
  if (extras.settings !== undefined) {
    checkSettings(file, extras.settings);
    metadata.settings = JSON.stringify(extras.settings);
  }
  await writeSafetensorsStreamedAsync(file, tensors, partsOf, metadata);
}

function parseJson(file: string, key: string, text: string | undefined): unknown {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text);
  } catch (cause) {
    throw new TrainingError(`checkpoint '${file}': metadata '${key}' is not valid JSON`, { cause });
  }
}

/** Longest list of names an error message spells out. */
const NAMES_SHOWN = 5;

function listNames(names: readonly string[]): string {
  const shown = names
    .slice(0, NAMES_SHOWN)
    .map((n) => `'${n}'`)
    .join(", ");
  return names.length > NAMES_SHOWN ? `${shown} and ${names.length - NAMES_SHOWN} more` : shown;
}

type CheckedHeader = Omit<CheckpointInfo, "file">;

/**
 * Checks a checkpoint's header before any tensor is read: the format, the
 * step, the model config (bounded, see validateGptConfig), and that the file's
 * tensors are exactly the parameters that config implies (float32, right
 * shapes), plus optionally both optimizer moments as float32 vectors of the
 * parameter count. Nothing large is allocated: the parameter list is bounded
 * by the config's limits and the tensors are only described by the header.
 */
export function checkCheckpointHeader(file: string, header: SafetensorsHeader): CheckedHeader {
  const { metadata } = header;
  if (metadata.format !== CHECKPOINT_FORMAT) {
    throw new TrainingError(`'${file}' is not a ulysses-ts checkpoint (format '${shortText(metadata.format ?? "missing")}', expected '${CHECKPOINT_FORMAT}')`);
  }
  for (const [key, value] of Object.entries(metadata)) {
    const limit = METADATA_LIMITS[key] ?? OTHER_METADATA_BYTES;
    if (value.length > limit)
      throw new TrainingError(
        `checkpoint '${file}': metadata '${key}' holds ${value.length} characters, more than the ${limit} a checkpoint's '${key}' can need`,
      );
  }
  const step = Number(metadata.step);
  if (metadata.step === undefined || !Number.isSafeInteger(step) || step < 0)
    throw new TrainingError(`checkpoint '${file}': step '${metadata.step}' is not a non-negative integer`);
  const config = parseJson(file, "config", metadata.config);
  if (config === null || typeof config !== "object" || Array.isArray(config)) {
    throw new TrainingError(
      `checkpoint '${file}': metadata 'config' must be a JSON object describing the model, got ${metadata.config === undefined ? "nothing" : metadata.config.slice(0, 80)}`,
    );
  }
  let specs: ParamSpec[];
  try {
    specs = gptParamSpecs(config as GptConfig);
  } catch (cause) {
    throw new TrainingError(`checkpoint '${file}': ${(cause as Error).message}`, { cause });
  }
  const entries = new Map(header.entries.map((e) => [e.name, e]));
  let parameters = 0;
  const missing: string[] = [];
  for (const spec of specs) {
    const e = entries.get(spec.name);
    parameters += spec.shape.reduce((a, b) => a * b, 1);
    if (e === undefined) {
      missing.push(spec.name);
      continue;
    }
    if (e.dtype !== "float32" || e.shape.join() !== spec.shape.join()) {
      throw new TrainingError(
        `checkpoint '${file}': parameter '${spec.name}' should be float32 [${spec.shape.join(", ")}], found ${e.dtype} [${e.shape.join(", ")}]`,
      );
    }
  }
  if (missing.length > 0) {
    throw new TrainingError(
      `checkpoint '${file}': the model config (${describeConfig(config as GptConfig)}) implies ${specs.length} parameters, but ${missing.length} are not in the file: ${listNames(missing)}`,
    );
  }
  const moments = MOMENTS.filter((name) => entries.has(name));
  if (moments.length === 1) throw new TrainingError(`checkpoint '${file}': has '${moments[0]}' but not '${MOMENTS.find((n) => n !== moments[0])}'`);
  for (const name of moments) {
    const e = entries.get(name)!;
    if (e.dtype !== "float32" || e.shape.length !== 1 || e.shape[0] !== parameters) {
      throw new TrainingError(
        `checkpoint '${file}': optimizer moment '${name}' should be float32 [${parameters}] (the parameter count), found ${e.dtype} [${e.shape.join(", ")}]`,
      );
    }
  }
  const known = new Set<string>([...specs.map((s) => s.name), ...MOMENTS]);
  const extra = header.entries.map((e) => e.name).filter((name) => !known.has(name));
  if (extra.length > 0) {
    throw new TrainingError(
      `checkpoint '${file}': ${extra.length} tensors are not parameters of the model config (${describeConfig(config as GptConfig)}): ${listNames(extra)}`,
    );
  }
  return {
    step,
    config: modelConfig(config as GptConfig),
    rng: parseJson(file, "rng", metadata.rng),
    data: parseJson(file, "data", metadata.data),
    settings: parseJson(file, "settings", metadata.settings),
  };
}

export const MOMENTS = ["optimizer.m", "optimizer.v"] as const;

/**
 * Longest JSON header of a checkpoint (bytes), checked on its 8-byte length
 * before the header is read: the tensor table of the largest model the config
 * limits allow (4096 layers of at most 16 tensors, about 130 bytes an entry:
 * 8.5 MB) plus the metadata below; the 100 MB of a general safetensors file
 * would cost a reader several hundred MB of strings and objects.
 */
export const CHECKPOINT_MAX_HEADER_BYTES = 16 << 20;

/**
 * Longest value of each metadata key (characters). What a trainer writes is far
 * smaller: a GPT config is about 200, the RNG state about 100, the settings
 * about 2,000, the data state about 100 a document of the shuffle buffer (64).
 */
export const METADATA_LIMITS: Readonly<Record<string, number>> = {
  format: 64,
  step: 32,
  config: 4096,
  rng: 4096,
  settings: 64 << 10,
  data: 1 << 20,
};
/** Longest value of a metadata key a checkpoint does not use (characters). */
const OTHER_METADATA_BYTES = 4096;

function shortText(text: string): string {
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

/**
 * The model fields of a checkpoint's config (validated by gptParamSpecs
 * first), the optional ones (norm, mlpHidden, eps, ropeBase, ropeScaling)
 * when present: a Hugging Face family's model keeps its width, epsilon and
 * RoPE. Checkpoints written before the model became one-device code also
 * carry `attention` (the sequence-parallel kind, a run setting now kept in
 * the settings); it is dropped here.
 */
export function modelConfig(config: GptConfig): GptConfig {
  const { vocab, hidden, heads, kvHeads, layers, mlp, mlpRatio, maxSeq, tiedHead } = config;
  const model: GptConfig = { vocab, hidden, heads, kvHeads, layers, mlp, mlpRatio, maxSeq, tiedHead };
  // the optional fields that change the model, where the config has them (validated with the rest by gptParamSpecs)
  for (const key of OPTIONAL_MODEL_FIELDS) if (config[key] !== undefined) (model as unknown as Record<string, unknown>)[key] = config[key];
  if (config.ropeScaling !== undefined) model.ropeScaling = copyRopeScaling(config.ropeScaling);
  return model;
}

const OPTIONAL_MODEL_FIELDS = [
  "norm",
  "mlpHidden",
  "eps",
  "ropeBase",
  "headDim",
  "attentionBias",
  "mlpBias",
  "qkNorm",
] as const satisfies readonly (keyof GptConfig)[];

function describeConfig(config: GptConfig): string {
  return `layers ${config.layers}, hidden ${config.hidden}, heads ${config.heads}/${config.kvHeads}, vocab ${config.vocab}`;
}

/**
 * Reads and validates a checkpoint's header only (the same checks as
 * loadCheckpoint, without reading any tensor): for callers that need the
 * step, the model config or the settings.
 */
export function inspectCheckpoint(file: string): CheckpointInfo {
  return { file, ...checkCheckpointHeader(file, readSafetensorsHeader(file, { maxHeaderBytes: CHECKPOINT_MAX_HEADER_BYTES })) };
}

export interface LoadCheckpointOptions {
  /**
   * Runs on the validated header (what inspectCheckpoint returns) before any
   * tensor is allocated; throw to refuse the file. A trainer checks here that
   * the file describes the model it builds, so the tensors of any other model
   * (a file replaced since it was inspected) are never read.
   */
  check?(info: CheckpointInfo): void;
}

/**
 * Reads a checkpoint (weights-only files without optimizer moments load too).
 * The file is untrusted: its header and model config are validated against
 * each other before any tensor is allocated (see checkCheckpointHeader and
 * readSafetensors), so a crafted file is refused quickly and cheaply.
 */
export function loadCheckpoint(file: string, options: LoadCheckpointOptions = {}): LoadedCheckpoint {
  let checked: CheckedHeader | undefined;
  const { tensors } = readSafetensors(file, {
    maxHeaderBytes: CHECKPOINT_MAX_HEADER_BYTES,
    check: (header) => {
      checked = checkCheckpointHeader(file, header);
      options.check?.({ file, ...checked });
    },
  });
  const flat = (name: string) => (tensors.get(name)?.data as Float32Array | undefined) ?? null;
  return { file, ...checked!, weights: tensors, m: flat("optimizer.m"), v: flat("optimizer.v") };
}

/** Copies the checkpoint's weights into a parameter store. */
export function loadWeightsInto(params: ParameterStore, checkpoint: LoadedCheckpoint): void {
  for (const spec of params.specs) params.setParameter(spec.name, checkpoint.weights.get(spec.name)!.data as Float32Array);
}

/** Restores weights, moments and step into a trainer whose model has the checkpoint's config. */
export function restoreCheckpoint(trainer: Trainer, checkpoint: LoadedCheckpoint): void {
  // both in modelConfig's order, so a config built in another key order (a Hugging Face family's) compares by its values
  const a = JSON.stringify(modelConfig(trainer.model.config));
  const b = JSON.stringify(checkpoint.config);
  if (a !== b) throw new TrainingError(`checkpoint '${checkpoint.file}' was written for model ${b}, not ${a}`);
  if (checkpoint.m === null || checkpoint.v === null)
    throw new TrainingError(`checkpoint '${checkpoint.file}' has no optimizer state; it cannot resume training`);
  if (checkpoint.m.length !== trainer.model.params.size || checkpoint.v.length !== trainer.model.params.size) {
    throw new TrainingError(`checkpoint '${checkpoint.file}': optimizer moments have ${checkpoint.m.length} entries, the model ${trainer.model.params.size}`);
  }
  loadWeightsInto(trainer.model.params, checkpoint);
  trainer.weightsChanged();
  trainer.restoreMoments(checkpoint.m, checkpoint.v, checkpoint.step);
}
