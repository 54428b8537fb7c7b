/**
 * Model families: how a Hugging Face model directory's config.json and tensor
 * names map onto this library's model, one spec object per family,
 * registered by name (like the norms, MLPs and sequence-parallel schemes). A
 * family reads every config field that changes the math, or refuses it by
 * name; nothing it does not understand is silently ignored.
 */
import { ModelError } from "../errors.js";
import type { GptConfig } from "../gpt-config.js";
import { gptFamily } from "./gpt.js";
import { llamaFamily } from "./llama.js";
import { qwen2Family } from "./qwen2.js";
import { qwen3Family } from "./qwen3.js";

/** A checkpoint tensor: its name there, and whether the matrix is stored [out, in] (Hugging Face's nn.Linear) where ours is [in, out]. */
export interface CheckpointTensor {
  name: string;
  transposed: boolean;
}

export interface ModelFamily {
  readonly name: string;
  /** The config.json `model_type` values it reads. */
  readonly modelTypes: readonly string[];
  /** config.json's object -> the model's config; `file` names it in messages (every refusal names the key). */
  configFrom(json: Readonly<Record<string, unknown>>, file: string): GptConfig;
  /** Our parameter's name (gptParamSpecs) -> its tensor in the family's checkpoints. */
  tensorOf(parameter: string, config: GptConfig): CheckpointTensor;
}

const families = new Map<string, ModelFamily>();

/** Adds a family under its name; its model types must be new too. */
export function registerModelFamily(family: ModelFamily): void {
  if (!/^[a-z][a-z0-9_-]*$/.test(family.name)) throw new ModelError(`a model family's name must be lower-case letters, digits, _ and -, got '${family.name}'`);
  if (families.has(family.name)) throw new ModelError(`a model family named '${family.name}' is registered already`);
  for (const type of family.modelTypes) {
    const owner = [...families.values()].find((f) => f.modelTypes.includes(type));
    if (owner !== undefined) throw new ModelError(`model_type '${type}' belongs to the family '${owner.name}' already`);
  }
  families.set(family.name, family);
}

/** The registered families' model types. */
export function modelTypes(): string[] {
  return [...families.values()].flatMap((f) => [...f.modelTypes]);
}

/** The family that reads config.json's `model_type`; a ModelError naming the file and the types read otherwise. */
export function modelFamilyOf(json: Readonly<Record<string, unknown>>, file: string): ModelFamily {
  const type = json.model_type;
  const family = typeof type === "string" ? [...families.values()].find((f) => f.modelTypes.includes(type)) : undefined;
  if (family === undefined)
    throw new ModelError(
      `config '${file}': model_type ${JSON.stringify(type) ?? "missing"} is not a model family this library reads (${modelTypes().join(", ")})`,
    );
  return family;
}

registerModelFamily(llamaFamily);
registerModelFamily(gptFamily);
registerModelFamily(qwen2Family);
registerModelFamily(qwen3Family);
