/**
 * @ulysses/collectives/testing: the conformance suite for backend authors.
 * `runConformance(group)` runs on every rank (works under mpirun: no test
 * runner needed on the ranks); `describeConformance` registers the same checks
 * as vitest tests for a world driven from one process.
 */
export type { ConformanceCheck } from "./check.js";
export { CONFORMANCE_CHECKS, runConformance, selectChecks, type CheckResult, type RunConformanceOptions } from "./run.js";
export { describeConformance, type ConformanceWorld, type RemoteWorld, type DescribeConformanceOptions } from "./describe-conformance.js";
export { splitWorld, type SplitWorld } from "../split-world.js";
