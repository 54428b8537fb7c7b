/** @ulysses/project: the cluster-scale projection (cost model, collective costs, profiles), its check against measurements, and the SVG chart helper. */
export { parseProfile, attentionEfficiencyAt, elementwiseNsAt, ProjectionError, type HardwareProfile, type LinkProfile } from "./profile.js";
export { collectiveCost, type CollectiveKind, type CollectiveCost } from "./collective-cost.js";
export { project, bestProjection, parameterCount, forwardFlops, validateRun, type GptShape, type RunShape, type Scheme, type Projection } from "./cost-model.js";
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
export { lineChart, type Series, type ChartOptions } from "./svg-chart.js";
