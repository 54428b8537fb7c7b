/**
 * describeConformance: the vitest face of the suite. For each group size it
 * makes a world and registers one test per check. The world is either an
 * in-process one (one ProcessGroup per rank, all driven from this thread,
 * like the local backend) or a remote one (ranks elsewhere, e.g. worker
 * threads: it runs the checks on every rank and returns each rank's results).
 */
import { afterAll, beforeAll, describe, it } from "vitest";
import type { ProcessGroup } from "../types.js";
import { selectChecks, type CheckResult } from "./run.js";

export interface RemoteWorld {
  /** Runs the named checks on every rank; results per rank, in check order. */
  run(names: readonly string[]): Promise<CheckResult[][]>;
  close?(): Promise<unknown>;
}

export type ConformanceWorld = ProcessGroup[] | RemoteWorld;

export interface DescribeConformanceOptions {
  sizes?: readonly number[];
  only?: readonly string[];
}

function failureText(perRank: readonly (CheckResult | undefined)[]): string | null {
  const failed = perRank.flatMap((res, r) => (res?.status === "failed" ? [`rank ${r}: ${res.error}`] : res ? [] : [`rank ${r}: no result`]));
  return failed.length ? failed.join("\n") : null;
}

export function describeConformance(
  name: string,
  makeWorld: (size: number) => ConformanceWorld | Promise<ConformanceWorld>,
  options: DescribeConformanceOptions = {},
): void {
  const checks = selectChecks(options.only);
  describe(name, () => {
    for (const size of options.sizes ?? [1, 2, 4]) {
      describe(`P=${size}`, () => {
        let world: ConformanceWorld;
        // a remote world runs everything once; the tests read its results
        let remote: Promise<CheckResult[][]> | null = null;
        beforeAll(async () => {
          world = await makeWorld(size);
          if (!Array.isArray(world)) remote = world.run(checks.map((c) => c.name));
        });
        afterAll(async () => {
          if (world && !Array.isArray(world)) await world.close?.();
        });
        checks.forEach((check, index) => {
          const applies = size >= (check.minSize ?? 1);
          it.skipIf(!applies)(check.name, async () => {
            let perRank: (CheckResult | undefined)[];
            if (Array.isArray(world)) {
              const settled = await Promise.allSettled(world.map((g) => check.run(g)));
              perRank = settled.map((s) => ({
                name: check.name,
                status: s.status === "fulfilled" ? "passed" : "failed",
                error: s.status === "rejected" ? String((s.reason as Error)?.message ?? s.reason) : undefined,
                ms: 0,
              }));
            } else {
              perRank = (await remote!).map((results) => results[index]);
            }
            const failure = failureText(perRank);
            if (failure) throw new Error(`${check.name} failed at P=${size}:\n${failure}`);
          });
        });
      });
    }
  });
}
