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
import { exportHfDirectory, gptFamily, gptParamSpecs, type ExportedHf, type GptConfig, type HfDType, type ParameterStore } from "@ulysses/model";
import { Tensor } from "@ulysses/tensors";
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
  const source = hfModelOf(config)?.json.torch_dtype ?? hfModelOf(config)?.json.dtype;
  return source === "bfloat16" || source === "float16" ? source : "float32";
}

/** The named views of a flat parameter vector in the model's parameter order. */
function views(config: GptConfig, flat: Float32Array): Pick<ParameterStore, "value"> {
  const at = new Map<string, { shape: readonly number[]; offset: number; size: number }>();
  let offset = 0;
  for (const spec of gptParamSpecs(config)) {
    const size = spec.shape.reduce((a, b) => a * b, 1);
    at.set(spec.name, { shape: spec.shape, offset, size });
    offset += size;
  }
  if (offset !== flat.length) throw new TrainerError(`hf export: the weights hold ${flat.length} values, the model ${offset}`);
  return {
    value(name: string) {
      const slot = at.get(name);
      if (slot === undefined) throw new TrainerError(`hf export: no parameter '${name}'`);
      return new Tensor("float32", slot.shape, flat.subarray(slot.offset, slot.offset + slot.size));
    },
  };
}

/** Writes `outDir`/hf from the trained weights (world rank 0's flat vector). */
export function exportRunHf(outDir: string, config: TrainConfig, model: GptConfig, weights: Float32Array): ExportedHf {
  const hf = hfModelOf(config);
  const family = hf?.family ?? gptFamily;
  const json = hf?.json ?? gptFamily.configTo(model);
  return exportHfDirectory(path.join(outDir, HF_DIR), views(model, weights), model, family, json, {
    dtype: saveDtypeOf(config),
    ...(hf === null ? {} : { tokenizerFrom: hf.tokenizerDir }),
  });
}
