/**
 * @ulysses/model: the GPT as one-device model code (its forward written once
 * for training and ONNX export), its parameters, weights in safetensors, and
 * sampling. No communication: sequence parallelism is applied from outside
 * by @ulysses/parallel, training by @ulysses/training.
 */
export { ModelError } from "./errors.js";
export type { CausalLM, CausalLMContext, CausalLMForward, CausalLMHead, LMBatch, LMBatchDocuments } from "./causal-lm.js";
export { writeFileAtomic, writeFileAtomicAsync } from "./atomic-write.js";
export {
  encodeSafetensors,
  decodeSafetensors,
  readSafetensors,
  readSafetensorsHeader,
  forEachSafetensor,
  readSafetensorRanges,
  writeSafetensors,
  type SafetensorsContents,
  type SafetensorsEntry,
  type SafetensorsHeader,
  type SafetensorsRange,
} from "./safetensors.js";
export { gptParamSpecs, validateGptConfig, parameterCount, blockConfigOf, GPT_CONFIG_LIMITS, type GptConfig, type ParamSpec } from "./gpt-config.js";
/** The default rows of a head group's row tile (TransformerBlock headGroupTileRows), for memory accounts. */
export { headGroupTileRowsOf } from "@ulysses/block";
/** The norm, activation and RoPE ops a block calls (a run names those without a native kernel). */
export { elementwiseOpsOf } from "@ulysses/block";
/** The MLPs a model may use (registered in @ulysses/block), and their components. */
export { mlpComponent, mlpNames } from "@ulysses/block";
export { ParameterStore, type BlockGradientSink, type HeldGradientRange, type ParamSlot, type ParameterStoreOptions } from "./parameters.js";
export { parameterMemory, type ParameterMemory } from "./memory-terms.js";
export { gptForward, gptHidden, type GptMath } from "./gpt-forward.js";
export {
  Gpt,
  storesBfloat16,
  HEAD_GRADIENT_BLOCK_BYTES,
  headGradientColumns,
  type GptOptions,
  type GptForwardOptions,
  type GptContext,
  type GptLogitsContext,
  type GptHead,
  type GptHeadOptions,
} from "./gpt.js";
export { buildOnnxModel, exportOnnx } from "./export-onnx.js";
export { sampleToken, type SamplingOptions } from "./sampling.js";
export { GptDecoder, KvCacheAttention } from "./kv-cache.js";
export { OnnxLM } from "./onnx-lm.js";
export { MAX_CONFIG_FILE_BYTES, fileKind, fileProblem, readJsonObject, readRegularFile } from "./files/input-files.js";
export { errnoText } from "./files/errno.js";
export { HfTokenizer, MAX_TOKENIZER_CONFIG_BYTES, MAX_TOKENIZER_JSON_BYTES, type EncodeOptions } from "./hf-tokenizer.js";
export type { ChatMessage, DocumentTokenizer, TokenizedDocument } from "./tokenized-document.js";
export { registerModelFamily, modelFamilyOf, modelTypes, type CheckpointTensor, type ModelFamily } from "./families/family.js";
export { llamaFamily } from "./families/llama.js";
export { qwen2Family } from "./families/qwen2.js";
export { qwen3Family } from "./families/qwen3.js";
export { importWeights, checkWeights, MAX_INDEX_BYTES } from "./families/import-weights.js";
export { gptFamily, GPT_MODEL_TYPE } from "./families/gpt.js";
export {
  exportHfDirectory,
  shardName,
  DEFAULT_MAX_SHARD_BYTES,
  MAX_TOKENIZER_FILE_BYTES,
  TOKENIZER_FILES,
  type ExportHfOptions,
  type ExportedHf,
  type HfDType,
} from "./families/export-hf.js";
export { streamedOrder, writeSafetensorsStreamed, writeSafetensorsStreamedAsync, tensorBytes, type StreamedTensor } from "./safetensors-stream.js";
