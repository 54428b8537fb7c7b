/**
 * @ulysses/collectives/backend: the API for writing a backend, apart from the
 * ProcessGroup API users call: the validated plan of every operation
 * (`planOp`, the same checks and messages on every backend), point-to-point
 * checks, the reduction loop, `GroupBase` (a ProcessGroup from three
 * exchange primitives) and the statistics recorder. Register the backend with
 * `registerBackend` of the root entry.
 */
export type { BackendFactory, BackendInitOptions } from "./types.js";
export { StatsRecorder, trafficOf, type Traffic } from "./stats.js";
export { planOp, outputShapeOf, checkP2P, clipText, type OpHeader, type Plan, type PlanResult, type P2PHeader } from "./plan.js";
export { reduceInto, type Source } from "./reduce.js";
export { asTensor } from "./buffer.js";
export { GroupBase, type Exchanged } from "./group-base.js";
