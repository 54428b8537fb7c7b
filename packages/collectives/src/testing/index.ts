/**
 * @ulysses/collectives/testing: the conformance suite for backend authors.
 * `runConformance(group)` runs on every rank (works under mpirun, or any plain
 * node process: this entry imports no test runner). `describeConformance`, which
 * registers the same checks as vitest tests for a world driven from one
 * process, lives in `@ulysses/collectives/testing/vitest`.
 */
export type { ConformanceCheck } from "./check.js";
export { CONFORMANCE_CHECKS, runConformance, selectChecks, type CheckResult, type RunConformanceOptions } from "./run.js";
export { splitWorld, type SplitWorld } from "../split-world.js";
