/** @ulysses/collectives: the ProcessGroup API, backends and launch helpers. No compute inside. */
export { CollectiveError } from "./errors.js";
export {
  OP_KINDS,
  type ProcessGroup,
  type CommBuffer,
  type ReduceOp,
  type OpKind,
  type OpStats,
  type CommStats,
  type AllToAllOptions,
  type AllGatherOptions,
  type ReduceScatterOptions,
  type BackendInitOptions,
  type BackendFactory,
} from "./types.js";
export { createLocalGroups, type LocalGroupsOptions } from "./local/local-group.js";
export { registerBackend, getBackend, listBackends, loadBackend, init, type InitOptions } from "./registry.js";
export { launch, type LaunchOptions, type LaunchedWorld, type ShutdownOptions } from "./threads/launch.js";
export { RankSupervisor, SETTLE_MS, type SuperviseOptions } from "./threads/supervisor.js";
export type { RankContext, RankSetup } from "./threads/protocol.js";
export { createThreadsGroup } from "./threads/context.js";
export { splitWorld, type SplitWorld } from "./split-world.js";
export { launcherRank, launcherWorldSize, localRanksOnHost } from "./launcher-env.js";
export { startRanks, type RankWorld, type StartRanksOptions } from "./start-ranks.js";
