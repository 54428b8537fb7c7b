/** @ulysses/project: the cluster-scale projection (cost model, collective costs, profiles) and its check against measurements. */
export { parseProfile, attentionEfficiencyAt, elementwiseNsAt, ProjectionError, type HardwareProfile, type LinkProfile } from "./profile.js";
export { collectiveCost, type CollectiveKind, type CollectiveCost } from "./collective-cost.js";
export {
  project,
  bestProjection,
  parameterCount,
  gptDimensionsOf,
  validateRun,
  type GptShape,
  type RunShape,
  type Scheme,
  type Projection,
} from "./cost-model.js";
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
