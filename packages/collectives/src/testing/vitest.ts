/**
 * @ulysses/collectives/testing/vitest: the vitest face of the conformance
 * suite. `describeConformance(name, makeWorld, { sizes, only })` registers one
 * vitest test per check and group size, for a world driven from one process
 * (in-process groups, or a remote world such as launched worker threads).
 * This is the only entry of the package that imports vitest (an optional peer
 * dependency); `@ulysses/collectives/testing` (runConformance) needs no test
 * runner.
 */
export { describeConformance, type ConformanceWorld, type RemoteWorld, type DescribeConformanceOptions } from "./describe-conformance.js";
