/**
 * @ulysses/training: training a GPT on one device or parallelised
 * (`parallelize` of @ulysses/parallel): the SP-aware loss, AdamW with
 * ZeRO-1, gradient clipping, the learning-rate schedule, the step,
 * checkpoints, the data tasks (byte-level text, long-range key-value recall),
 * the memory account of a run, and its reports (metrics.jsonl, the summary
 * table, the loss plot).
 */
export { TrainingError } from "./errors.js";
export { AdamW, type AdamWOptions } from "./adamw.js";
export { learningRateAt, type LrSchedule } from "./lr-schedule.js";
export { globalGradNorm, clipGradNorm, normOfSums, clipScaleOf } from "./grad-clip.js";
export { sliceGradients, GRADIENT_DTYPES, type GradientDtype, type SliceGradients } from "./slice-gradients.js";
export { IGNORE_INDEX, shiftWindows, batchRows } from "./data/batch.js";
export {
  recallBatch,
  recallBaselines,
  recallDistances,
  recallLayout,
  recallMinVocab,
  validateRecallTask,
  RECALL_MIN_SEQ,
  type RecallLayout,
  type RecallTaskOptions,
  type RecallVocabulary,
} from "./data/recall-task.js";
export { recallReport, type RecallReport, type RecallReportLayout } from "./data/recall-report.js";
export { ByteTextData, BYTE_VOCAB } from "./data/text-data.js";
export {
  DocumentData,
  readsDocuments,
  DEFAULT_SHUFFLE_BUFFER,
  DEFAULT_CHECK_BYTES,
  type DocumentDataOptions,
  type DocumentDataState,
  type DocumentCheck,
} from "./data/document-data.js";
export { corpusDigest } from "./data/corpus-digest.js";
export { LOSS_ON, DEFAULT_MAX_DOCUMENT_BYTES, type LossOn } from "./data/tokenized-documents.js";
export { resolveTextFormat, listTextFiles, TEXT_FORMATS, DATA_FORMATS, type TextFormat, type TextFormatOption, type DocumentRef } from "./data/documents.js";
export { DocumentPacker, PAD_TOKEN, LONG_DOCUMENTS, type LongDocuments, type PackedBatch, type PackStats } from "./data/packer.js";
export { scoreTokens, type TokenScores } from "./score.js";
export { lossAndGradients, countCorrect, validateLossTileRows, type LossResult, type LossOptions, type TrainModel } from "./loss.js";
export { Trainer, ZERO_STAGES, type TrainStepOptions, type StepResult, type ZeroStage } from "./train-step.js";
export {
  saveCheckpoint,
  loadCheckpoint,
  inspectCheckpoint,
  restoreCheckpoint,
  loadWeightsInto,
  CHECKPOINT_FORMAT,
  type CheckpointExtras,
  type LoadedCheckpoint,
  type CheckpointInfo,
  type CheckpointSettings,
} from "./checkpoint.js";
export { checkpointWeights, restoreCheckpointFile } from "./checkpoint-files.js";
export { adamwMomentBytes, rankStateFloats, type RankStateFloats, type RankStateInput } from "./memory-terms.js";
export { estimateTrainingMemory, type TrainingMemoryInput, type MemoryEstimate, type MemoryTerm } from "./memory-account.js";
export { MetricsLog, readMetrics, readMetricsFile, type MetricsFile, type StepMetrics } from "./report/metrics-log.js";
export { formatTable, mfuRows, summaryRows, type SummaryContext } from "./report/summary.js";
export { lossPlotSvg, trailingMean } from "./report/loss-plot.js";
export { Progress, formatDuration } from "./report/progress.js";
export {
  checkRunDir,
  clearRunFiles,
  createRunDir,
  pseudoFileSystemOf,
  removeStaleTemporaries,
  type RunDirCheck,
  type RunDirState,
  type RunFiles,
} from "./files/run-directory.js";
/** Bounded reads of a user's files (from @ulysses/model, where the model directory is read). */
export { MAX_CONFIG_FILE_BYTES, errnoText, fileKind, fileProblem, readRegularFile } from "@ulysses/model";
