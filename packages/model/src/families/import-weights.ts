/**
 * Weights of a Hugging Face model directory into a model's parameters, tensor
 * by tensor: model.safetensors, or the shards a model.safetensors.index.json
 * names; float32, float16 or bfloat16 tensors under the family's names,
 * converted to float32 and transposed where the family stores matrices
 * [out, in]. Everything is checked before the first tensor is read: every
 * shard's header, and that each parameter has exactly one tensor of the
 * right shape. Missing, extra or wrongly shaped tensors are named with the
 * file and the key. Shard names are plain file names inside the directory.
 */
import fs from "node:fs";
import path from "node:path";
import { type Tensor, toDType } from "@ulysses/tensors";
import { ModelError } from "../errors.js";
import { readJsonObject } from "../files/input-files.js";
import { gptParamSpecs, type GptConfig } from "../gpt-config.js";
import type { ParameterStore } from "../parameters.js";
import { forEachSafetensor, readSafetensorsHeader, type SafetensorsEntry } from "../safetensors.js";
import type { ModelFamily } from "./family.js";

/** The largest model.safetensors.index.json read (a weight map of a few thousand names is well under 1 MB). */
export const MAX_INDEX_BYTES = 64 * 1024 * 1024;

/** Buffers some checkpoints carry that are no weights (RoPE's inverse frequencies): read past, as Hugging Face does. */
const NOT_WEIGHTS = /\.rotary_emb\.inv_freq$/;

const READABLE = new Set(["float32", "float16", "bfloat16"]);

/** The shard files of `dir` and the tensor names each holds (by the index, or the one model.safetensors). */
function shardsOf(dir: string): { index: string | null; files: string[] } {
  const indexFile = path.join(dir, "model.safetensors.index.json");
  if (!fs.existsSync(indexFile)) return { index: null, files: [path.join(dir, "model.safetensors")] };
  const map = readJsonObject(indexFile, MAX_INDEX_BYTES, "weight index").weight_map;
  if (map === null || typeof map !== "object" || Array.isArray(map)) throw new ModelError(`weight index '${indexFile}': weight_map must be an object`);
  const files = new Set<string>();
  for (const [key, shard] of Object.entries(map)) {
    if (typeof shard !== "string" || shard !== path.basename(shard) || shard === "." || shard === ".." || !shard.endsWith(".safetensors"))
      throw new ModelError(
        `weight index '${indexFile}': weight_map["${key}"] must name a .safetensors file in the same directory, got ${JSON.stringify(shard)}`,
      );
    files.add(shard);
  }
  return { index: indexFile, files: [...files].sort().map((f) => path.join(dir, f)) };
}

/**
 * Fills `params` (a ParameterStore of gptParamSpecs(config)) from the model
 * directory `dir` of `family`. Throws a ModelError naming the file and the
 * key of the first problem; every check runs before the first value is written.
 */
export function importWeights(dir: string, config: GptConfig, family: ModelFamily, params: ParameterStore): void {
  const { files, wanted } = checkedImport(dir, config, family);
  for (const file of files) {
    forEachSafetensor(
      file,
      (entry) => wanted.has(entry.name),
      (entry, tensor) => {
        const { parameter, transposed, shape } = wanted.get(entry.name)!;
        const values = (tensor.dtype === "float32" ? tensor : toDType(tensor, "float32")) as Tensor<"float32">;
        // sharded (ZeRO-3): the whole tensor made, the store keeps its slice
        const sharded = params.sharded;
        if (sharded && !transposed) return params.setParameter(parameter, values.data);
        const target = sharded ? new Float32Array(values.size) : params.value(parameter).data;
        if (!transposed) target.set(values.data);
        else {
          // [out, in] -> [in, out]
          const [rows, cols] = shape as [number, number];
          for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) target[c * rows + r] = values.data[r * cols + c]!;
        }
        if (sharded) params.setParameter(parameter, target);
      },
    );
  }
}

/**
 * The checks importWeights makes before it reads a value (every shard's
 * header; each parameter's tensor present once, of the right shape and a
 * readable dtype; no tensor left over), without reading any: a program runs
 * it before it starts anything. Throws a ModelError naming the file and key.
 */
export function checkWeights(dir: string, config: GptConfig, family: ModelFamily): void {
  checkedImport(dir, config, family);
}

function checkedImport(dir: string, config: GptConfig, family: ModelFamily) {
  const { index, files } = shardsOf(dir);
  const found = new Map<string, { file: string; entry: SafetensorsEntry }>();
  for (const file of files) {
    for (const entry of readSafetensorsHeader(file).entries) {
      if (NOT_WEIGHTS.test(entry.name)) continue;
      const other = found.get(entry.name);
      if (other !== undefined) throw new ModelError(`'${file}': tensor '${entry.name}' is in '${other.file}' too`);
      found.set(entry.name, { file, entry });
    }
  }
  const wanted = new Map<string, { parameter: string; transposed: boolean; shape: number[] }>();
  for (const spec of gptParamSpecs(config)) {
    const tensor = family.tensorOf(spec.name, config);
    const shape = tensor.transposed ? [...spec.shape].reverse() : [...spec.shape];
    const at = found.get(tensor.name);
    if (at === undefined) throw new ModelError(`'${index ?? files[0]}': the ${family.name} model's tensor '${tensor.name}' is missing`);
    const { entry } = at;
    if (entry.shape.length !== shape.length || entry.shape.some((d, i) => d !== shape[i]))
      throw new ModelError(`'${at.file}': tensor '${tensor.name}' has shape [${entry.shape.join(", ")}], the config says [${shape.join(", ")}]`);
    if (!READABLE.has(entry.dtype)) throw new ModelError(`'${at.file}': tensor '${tensor.name}' is ${entry.dtype}; float32, float16 or bfloat16 are read`);
    wanted.set(tensor.name, { parameter: spec.name, transposed: tensor.transposed, shape });
  }
  for (const [name, { file }] of found) if (!wanted.has(name)) throw new ModelError(`'${file}': tensor '${name}' is not a weight of this ${family.name} model`);
  return { files, wanted };
}
