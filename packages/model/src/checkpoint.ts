/**
 * Checkpoints in safetensors: every parameter under its own name, the AdamW
 * moments as two flat vectors (`optimizer.m`, `optimizer.v`, the layout of the
 * flat parameter vector, so they load whatever the ZeRO sharding), and in the
 * metadata the step, the GPT config, the data RNG state and any caller
 * settings (JSON strings). Saving is collective under ZeRO-1 (the moments are
 * gathered); only the rank given `write: true` touches the file, atomically.
 */
import { Tensor } from "@ulysses/tensors";
import { ModelError } from "./errors.js";
import type { GptConfig } from "./gpt-config.js";
import { gptParamSpecs } from "./gpt-config.js";
import { readSafetensors, writeSafetensors } from "./safetensors.js";
import type { Trainer } from "./train-step.js";
import type { ParameterStore } from "./parameters.js";

export const CHECKPOINT_FORMAT = "ulysses-ts-checkpoint/1";

export interface CheckpointExtras {
  /** Any JSON-serialisable state (the data RNG's getState()). */
  rng?: unknown;
  /** Any JSON-serialisable settings (the run configuration). */
  settings?: unknown;
}

export interface LoadedCheckpoint {
  file: string;
  step: number;
  config: GptConfig;
  rng: unknown;
  settings: unknown;
  weights: Map<string, Tensor>;
  m: Float32Array | null;
  v: Float32Array | null;
}

/** Collective under ZeRO-1 (every rank calls it); the rank with `write` writes `file`. */
export async function saveCheckpoint(file: string, trainer: Trainer, extras: CheckpointExtras, write: boolean): Promise<void> {
  const { m, v } = await trainer.fullMoments();
  if (!write) return;
  const { params, config } = trainer.model;
  const tensors = new Map<string, Tensor>();
  for (const spec of params.specs) tensors.set(spec.name, params.value(spec.name));
  tensors.set("optimizer.m", new Tensor("float32", [m.length], m));
  tensors.set("optimizer.v", new Tensor("float32", [v.length], v));
  const metadata: Record<string, string> = {
    format: CHECKPOINT_FORMAT,
    step: String(trainer.step),
    config: JSON.stringify(config),
  };
  if (extras.rng !== undefined) metadata.rng = JSON.stringify(extras.rng);
  if (extras.settings !== undefined) metadata.settings = JSON.stringify(extras.settings);
  writeSafetensors(file, tensors, metadata);
}

function parseJson(file: string, key: string, text: string | undefined): unknown {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text);
  } catch (cause) {
    throw new ModelError(`checkpoint '${file}': metadata '${key}' is not valid JSON`, { cause });
  }
}

/** Reads a checkpoint (weights-only files without optimizer moments load too). */
export function loadCheckpoint(file: string): LoadedCheckpoint {
  const { tensors, metadata } = readSafetensors(file);
  if (metadata.format !== CHECKPOINT_FORMAT) {
    throw new ModelError(`'${file}' is not a ulysses-ts checkpoint (format '${metadata.format ?? "missing"}', expected '${CHECKPOINT_FORMAT}')`);
  }
  const config = parseJson(file, "config", metadata.config) as GptConfig;
  const step = Number(metadata.step);
  if (!Number.isInteger(step) || step < 0) throw new ModelError(`checkpoint '${file}': step '${metadata.step}' is not a non-negative integer`);
  for (const spec of gptParamSpecs(config)) {
    const t = tensors.get(spec.name);
    if (t === undefined || t.dtype !== "float32" || t.shape.join() !== spec.shape.join()) {
      throw new ModelError(`checkpoint '${file}': parameter '${spec.name}' should be float32 [${spec.shape.join(", ")}], found ${t === undefined ? "nothing" : String(t)}`);
    }
  }
  const flat = (name: string) => (tensors.get(name)?.data as Float32Array | undefined) ?? null;
  return { file, step, config, rng: parseJson(file, "rng", metadata.rng), settings: parseJson(file, "settings", metadata.settings), weights: tensors, m: flat("optimizer.m"), v: flat("optimizer.v") };
}

/** Copies the checkpoint's weights into a parameter store. */
export function loadWeightsInto(params: ParameterStore, checkpoint: LoadedCheckpoint): void {
  for (const spec of params.specs) params.value(spec.name).data.set(checkpoint.weights.get(spec.name)!.data as Float32Array);
}

/** Restores weights, moments and step into a trainer whose model has the checkpoint's config. */
export function restoreCheckpoint(trainer: Trainer, checkpoint: LoadedCheckpoint): void {
  const a = JSON.stringify(trainer.model.config);
  const b = JSON.stringify(checkpoint.config);
  if (a !== b) throw new ModelError(`checkpoint '${checkpoint.file}' was written for model ${b}, not ${a}`);
  if (checkpoint.m === null || checkpoint.v === null) throw new ModelError(`checkpoint '${checkpoint.file}' has no optimizer state; it cannot resume training`);
  if (checkpoint.m.length !== trainer.model.params.size || checkpoint.v.length !== trainer.model.params.size) {
    throw new ModelError(`checkpoint '${checkpoint.file}': optimizer moments have ${checkpoint.m.length} entries, the model ${trainer.model.params.size}`);
  }
  loadWeightsInto(trainer.model.params, checkpoint);
  trainer.restoreMoments(checkpoint.m, checkpoint.v, checkpoint.step);
}
