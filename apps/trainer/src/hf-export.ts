/**
 * The run's Hugging Face directory, `hf/` in the run directory, written at
 * the end of every completed run: config.json (a Hugging Face model's own,
 * as read; the built-in GPT's under model_type ulysses_gpt),
 * model.safetensors (sharded past 5 GiB, with an index) in --save-dtype, and
 * the tokenizer files of the model's tokenizer directory. transformers,
 * vLLM and llama.cpp's converter read it as they read the original, and
 * `ulysses-generate --model RUN/hf` decodes and scores with it.
 */
import path from "node:path";
import { exportHfDirectory, gptFamily, gptParamSpecs, ParameterStore, type ExportedHf, type GptConfig, type HfDType } from "@ulysses/model";
import type { TrainConfig } from "./config.js";
import { TrainerError } from "./errors.js";
import { hfModelOf } from "./hf-model.js";

export const HF_DIR = "hf";

const DTYPES: Record<"bf16" | "fp16" | "fp32", HfDType> = { bf16: "bfloat16", fp16: "float16", fp32: "float32" };

/** --save-dtype as a safetensors dtype: auto is a Hugging Face model's torch_dtype (bfloat16, float16 or float32; else float32), float32 for the built-in GPT. */
export function saveDtypeOf(config: TrainConfig): HfDType {
  if (config.saveDtype !== "auto") {
    const dtype = DTYPES[config.saveDtype];
    if (dtype === undefined) throw new TrainerError(`--save-dtype must be auto, bf16, fp16 or fp32, got '${String(config.saveDtype)}'`);
    return dtype;
  }
  const json = hfModelOf(config)?.json;
  const source = json?.torch_dtype ?? json?.dtype;
  return source === "bfloat16" || source === "float16" ? source : "float32";
}

/** Writes `outDir`/hf from the trained weights (world rank 0's flat vector). */
export function exportRunHf(outDir: string, config: TrainConfig, model: GptConfig, weights: Float32Array): ExportedHf {
  const hf = hfModelOf(config);
  const family = hf?.family ?? gptFamily;
  const json = hf?.json ?? gptFamily.configTo(model);
  // the store views the weights (its gradient is made only when asked for)
  return exportHfDirectory(path.join(outDir, HF_DIR), new ParameterStore(gptParamSpecs(model), { values: weights }), model, family, json, {
    dtype: saveDtypeOf(config),
    ...(hf === null ? {} : { tokenizerFrom: hf.tokenizerDir }),
  });
}
