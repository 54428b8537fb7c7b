/**
 * @ulysses/measure: the measuring helpers the trainer, the cluster projection
 * and the benchmarks share: the GPT's FLOP counts, ONNX Runtime's MatMul rate,
 * medians and percentiles, communication deltas between stats snapshots, and
 * an SVG line chart.
 */
export { MeasureError } from "./errors.js";
export { median, medianBy, medianOfSlowest, percentile } from "./median.js";
export {
  TRAINING_PASSES,
  attendedPairs,
  attentionFlops,
  documentPairs,
  gptForwardFlops,
  gptMatrixWeights,
  gptTrainingFlops,
  gptTrainingFlopsOverPairs,
  matmulFlopsPerToken,
  type AttentionShape,
  type GptDimensions,
  type SequenceFlops,
} from "./gpt-flops.js";
export { fastestRound, measureMatmulRate, type MatmulRateOptions, type RateCache, type RoundOptions } from "./matmul-rate.js";
export { commDelta, commSnapshot, type CommDelta } from "./comm-delta.js";
export { niceRange, niceStep, niceTicks } from "./nice-ticks.js";
export { lineChart, type ChartOptions, type ChartPoint, type RightAxis, type Series } from "./line-chart.js";
export {
  availableMemory,
  cgroupMemoryLimit,
  formatBytes,
  memAvailable,
  parseBytes,
  parseCgroupLimit,
  type AvailableMemory,
  type AvailableMemoryOptions,
  type CgroupLimit,
  type ReadText,
} from "./available-memory.js";
