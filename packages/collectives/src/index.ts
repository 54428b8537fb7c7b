/** @ulysses/collectives: the ProcessGroup API, backends and launch helpers. No compute inside. */
export { CollectiveError } from "./errors.js";
export { OP_KINDS, type ProcessGroup, type Buffer, type ReduceOp, type OpKind, type OpStats, type CommStats, type AllToAllOptions, type AllGatherOptions, type ReduceScatterOptions, type BackendInitOptions, type BackendFactory } from "./types.js";
