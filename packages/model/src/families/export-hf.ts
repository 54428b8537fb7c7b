/**
 * A Hugging Face model directory written from a model's parameters: the
 * config.json given (with torch_dtype set to the saved dtype), the weights as
 * model.safetensors, or, past a maximum shard size, as
 * model-0000i-of-0000n.safetensors shards with model.safetensors.index.json
 * ({metadata: {total_size}, weight_map}), and the tokenizer files of a source
 * directory. Tensors go under the family's names, matrices transposed back to
 * Hugging Face's [out, in]; a tied head is not written (the embedding is it).
 * float32 -> bfloat16 / float16 rounds to nearest even (@ulysses/tensors).
 *
 * Streamed: one tensor is converted and written at a time, never the whole
 * model. Everything goes to a temporary directory beside the target, which is
 * renamed into place once complete (a directory already there is replaced
 * only then), so no reader ever sees a half-written directory.
 */
import fs from "node:fs";
import path from "node:path";
import { Tensor, toDType } from "@ulysses/tensors";
import { ModelError } from "../errors.js";
import { fileKind } from "../files/input-files.js";
import { gptParamSpecs, type GptConfig } from "../gpt-config.js";
import type { ParameterStore } from "../parameters.js";
import { tensorBytes, writeSafetensorsStreamed, type StreamedTensor } from "../safetensors-stream.js";
import type { ModelFamily } from "./family.js";

export type HfDType = "float32" | "float16" | "bfloat16";

/** Hugging Face's default max_shard_size of save_pretrained: 5 GiB. */
export const DEFAULT_MAX_SHARD_BYTES = 5 * 1024 ** 3;

/** The tokenizer and generation files copied from a source directory when there. */
export const TOKENIZER_FILES = [
  "tokenizer.json",
  "tokenizer_config.json",
  "special_tokens_map.json",
  "generation_config.json",
  "added_tokens.json",
  "vocab.json",
  "merges.txt",
  "tokenizer.model",
  "chat_template.jinja",
] as const;

/** The largest tokenizer file copied (a 256K-token tokenizer.json is some tens of MB). */
export const MAX_TOKENIZER_FILE_BYTES = 1024 ** 3;

export interface ExportHfOptions {
  /** The saved dtype (default bfloat16). */
  dtype?: HfDType;
  /** Shards hold at most this many bytes of tensors (one tensor larger than it gets a shard of its own); default 5 GiB. */
  maxShardBytes?: number;
  /** A directory whose TOKENIZER_FILES (those present) are copied. */
  tokenizerFrom?: string;
}

/** What was written. */
export interface ExportedHf {
  /** The weight files, in order. */
  files: string[];
  /** Bytes of the tensors (the index's total_size). */
  totalBytes: number;
}

interface Planned extends StreamedTensor {
  parameter: string;
  transposed: boolean;
}

/** Shard file i (0-based) of n, as save_pretrained names it. */
export function shardName(i: number, n: number): string {
  const pad = (k: number) => String(k).padStart(5, "0");
  return `model-${pad(i + 1)}-of-${pad(n)}.safetensors`;
}

/** The tensor's bytes in `dtype`: the parameter's values, transposed [in, out] -> [out, in] when the family stores it so. */
function bytesOf(params: Pick<ParameterStore, "value">, t: Planned): Uint8Array {
  const value = params.value(t.parameter);
  let data = value.data;
  if (t.transposed) {
    // [in, out] -> [out, in]
    const [rows, cols] = value.shape as [number, number];
    data = new Float32Array(rows * cols);
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) data[c * rows + r] = value.data[r * cols + c]!;
  }
  const out = t.dtype === "float32" ? data : toDType(new Tensor("float32", [...t.shape], data), t.dtype).data;
  return new Uint8Array(out.buffer, out.byteOffset, out.byteLength);
}

/** Groups tensors into shards in order: a shard takes the next tensor unless that would pass `max` bytes (an empty shard takes any). */
function shardsOf(tensors: readonly Planned[], max: number): Planned[][] {
  const shards: Planned[][] = [];
  let size = 0;
  for (const t of tensors) {
    const bytes = tensorBytes(t);
    const current = shards[shards.length - 1];
    if (current === undefined || (current.length > 0 && size + bytes > max)) {
      shards.push([t]);
      size = bytes;
    } else {
      current.push(t);
      size += bytes;
    }
  }
  return shards;
}

function copyTokenizerFiles(from: string, to: string): void {
  for (const name of TOKENIZER_FILES) {
    const file = path.join(from, name);
    let stat: fs.Stats;
    try {
      stat = fs.statSync(file);
    } catch {
      continue;
    }
    if (!stat.isFile()) throw new ModelError(`tokenizer file '${file}' is ${fileKind(stat)}; only a regular file is copied`);
    if (stat.size > MAX_TOKENIZER_FILE_BYTES)
      throw new ModelError(`tokenizer file '${file}' has ${stat.size} bytes, above the limit of ${MAX_TOKENIZER_FILE_BYTES}`);
    fs.copyFileSync(file, path.join(to, name));
  }
}

/**
 * Writes the Hugging Face directory `dir` of the model whose parameters are
 * `params` (gptParamSpecs(config)): `configJson` (the source's config.json as
 * read, or the family's configTo) is written with torch_dtype set. Throws a
 * ModelError naming the directory; nothing is left half-written.
 */
export function exportHfDirectory(
  dir: string,
  params: Pick<ParameterStore, "value">,
  config: GptConfig,
  family: ModelFamily,
  configJson: Readonly<Record<string, unknown>>,
  options: ExportHfOptions = {},
): ExportedHf {
  const dtype = options.dtype ?? "bfloat16";
  if (dtype !== "float32" && dtype !== "float16" && dtype !== "bfloat16")
    throw new ModelError(`exportHfDirectory: dtype must be float32, float16 or bfloat16, got ${JSON.stringify(dtype)}`);
  const max = options.maxShardBytes ?? DEFAULT_MAX_SHARD_BYTES;
  if (!Number.isSafeInteger(max) || max < 1) throw new ModelError(`exportHfDirectory: maxShardBytes must be a positive integer, got ${String(max)}`);
  // the config.json written must describe this model: read back by the family, it gives the same config
  const described = family.configFrom(configJson, path.join(dir, "config.json"));
  const fields = new Set([...Object.keys(config), ...Object.keys(described)]) as Set<keyof GptConfig>;
  for (const field of fields)
    if (JSON.stringify(config[field]) !== JSON.stringify(described[field]))
      throw new ModelError(
        `exportHfDirectory: the config.json given describes ${field} ${JSON.stringify(described[field])}, the model has ${JSON.stringify(config[field])}`,
      );
  const planned: Planned[] = gptParamSpecs(config).map((spec) => {
    const { name, transposed } = family.tensorOf(spec.name, config);
    return { name, dtype, shape: transposed ? [...spec.shape].reverse() : [...spec.shape], parameter: spec.name, transposed };
  });
  const target = path.resolve(dir);
  const parent = path.dirname(target);
  fs.mkdirSync(parent, { recursive: true });
  const temp = fs.mkdtempSync(path.join(parent, `.${path.basename(target)}.tmp-`));
  // mkdtemp makes it private (0700): the finished directory is an ordinary one, readable as the files in it are
  fs.chmodSync(temp, 0o755 & ~process.umask());
  try {
    const shards = shardsOf(planned, max);
    const files = shards.map((_, i) => (shards.length === 1 ? "model.safetensors" : shardName(i, shards.length)));
    shards.forEach((shard, i) => writeSafetensorsStreamed(path.join(temp, files[i]!), shard, (t) => bytesOf(params, t as Planned), { format: "pt" }));
    const totalBytes = planned.reduce((n, t) => n + tensorBytes(t), 0);
    if (shards.length > 1) {
      const weightMap: Record<string, string> = {};
      const names = shards.flatMap((shard, i) => shard.map((t) => [t.name, files[i]!] as const)).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      for (const [name, file] of names) weightMap[name] = file;
      fs.writeFileSync(
        path.join(temp, "model.safetensors.index.json"),
        `${JSON.stringify({ metadata: { total_size: totalBytes }, weight_map: weightMap }, null, 2)}\n`,
      );
    }
    fs.writeFileSync(path.join(temp, "config.json"), `${JSON.stringify({ ...configJson, torch_dtype: dtype }, null, 2)}\n`);
    if (options.tokenizerFrom !== undefined) copyTokenizerFiles(options.tokenizerFrom, temp);
    // into place: the old directory (if any) moves aside first, and goes once the new one is there
    const old = fs.existsSync(target) ? `${temp}.old` : null;
    if (old !== null) fs.renameSync(target, old);
    try {
      fs.renameSync(temp, target);
    } catch (cause) {
      if (old !== null) fs.renameSync(old, target);
      throw cause;
    }
    if (old !== null) fs.rmSync(old, { recursive: true, force: true });
    return { files: files.map((f) => path.join(target, f)), totalBytes };
  } catch (cause) {
    fs.rmSync(temp, { recursive: true, force: true });
    if (cause instanceof ModelError) throw cause;
    throw new ModelError(`could not write the Hugging Face directory '${target}': ${(cause as Error).message}`, { cause });
  }
}
