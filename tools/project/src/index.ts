/** @ulysses/project: the cluster-scale projection (cost model, collective costs, profiles) and its checks against measurements. */
export { parseProfile, attentionEfficiencyAt, elementwiseNsAt, ProjectionError, type HardwareProfile, type LinkProfile } from "./profile.js";
export { collectiveCost, ringBandwidth, type CollectiveKind, type CollectiveCost } from "./collective-cost.js";
export {
  project,
  bestProjection,
  parameterCount,
  gptDimensionsOf,
  validateRun,
  schemeDegrees,
  megatronDeepSpeedFlops,
  type GptShape,
  type RunShape,
  type Scheme,
  type Projection,
} from "./cost-model.js";
export {
  sequenceParallelCost,
  ringPairsPerStep,
  ringPassSeconds,
  type RingLayout,
  type SequenceParallelCost,
  type SequenceParallelShape,
} from "./sp-cost.js";
export { factorizations, bestFactorization, factorizationRun, type Factorization } from "./factorization.js";
export {
  checkSchemes,
  parseSchemesFile,
  profileFromRates,
  schemesCheckMarkdown,
  schemeBlock,
  schemeRun,
  type SchemeRow,
  type SchemeCheckRow,
  type SchemeCheckOptions,
  type SchemeRates,
} from "./check-schemes.js";
export { BLOG_MODELS, BLOG_CHART_POINTS, BLOG_TEXT_CLAIMS, MEGATRON_DS_TABLE, type PublishedPoint } from "./blog-data.js";
export {
  compareWithBlog,
  compareWithMegatronDeepSpeedTable,
  blogComparisonReport,
  bestBlogConfiguration,
  blogRun,
  type ComparedPoint,
} from "./blog-comparison.js";
export {
  machineProfile,
  machineRun,
  calibrateFixedCosts,
  rankProfile,
  rankSpeed,
  checkProjection,
  type MachineMeasurements,
  type CalibrationPoint,
  type Calibration,
  type MeasuredStep,
  type CheckRow,
  type RankRates,
} from "./check.js";
