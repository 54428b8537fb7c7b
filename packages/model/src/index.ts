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
