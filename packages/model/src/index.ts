/** @ulysses/model: a small GPT with sequence-parallel loss, AdamW, checkpoints and ONNX export. */
export { ModelError } from "./errors.js";
export { writeFileAtomic } from "./atomic-write.js";
export { encodeSafetensors, decodeSafetensors, readSafetensors, writeSafetensors, type SafetensorsContents } from "./safetensors.js";
export { AdamW, type AdamWOptions } from "./adamw.js";
export { learningRateAt, type LrSchedule } from "./lr-schedule.js";
export { globalGradNorm, clipGradNorm } from "./grad-clip.js";
export { IGNORE_INDEX, shiftWindows, shardBatch, type Batch, type BatchShard } from "./data/batch.js";
export { recallBatch, recallVocabulary, recallMinSeq, validateRecallTask, type RecallTaskOptions, type RecallVocabulary } from "./data/recall-task.js";
export { ByteTextData, BYTE_VOCAB } from "./data/text-data.js";
export { gptParamSpecs, validateGptConfig, parameterCount, blockConfigOf, type GptConfig, type ParamSpec } from "./gpt-config.js";
export { ParameterStore, type ParamSlot } from "./parameters.js";
export { Gpt, type GptOptions, type GptContext } from "./gpt.js";
export { lossAndGradients, countCorrect, type LossResult } from "./loss.js";
export { Trainer, type TrainStepOptions, type StepResult } from "./train-step.js";
export { saveCheckpoint, loadCheckpoint, inspectCheckpoint, restoreCheckpoint, loadWeightsInto, CHECKPOINT_FORMAT, type CheckpointExtras, type LoadedCheckpoint, type CheckpointInfo } from "./checkpoint.js";
export { buildOnnxModel, exportOnnx } from "./export-onnx.js";
export { sampleToken, type SamplingOptions } from "./sampling.js";
