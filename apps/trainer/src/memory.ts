/**
 * `@ulysses/trainer/memory`: the trainer's memory account, the estimate its
 * preflight checks a run against, for tools that predict or check a run's
 * peak resident memory (`pnpm bench:memory` prints it next to the measured
 * peak of every row), with the configuration type and defaults it takes.
 */
export { estimateMemory, resolveMemoryArena } from "./preflight.js";
export { parseArgs } from "./args.js";
export type { MemoryEstimate, MemoryTerm } from "@ulysses/training";
export { AUTO_MLP_TILE_BYTES, AUTO_TILE_BYTES, DEFAULTS, tileRowsOf, type TileSetting, type TrainConfig } from "./config.js";
export { headGroupsOf } from "./plan.js";
