/**
 * runConformance: runs the named checks in order on this rank. Every rank of
 * the group calls it with the same options (under mpirun each process is one
 * rank and calls it once; in-process backends call it once per rank). A
 * failing check is reported and the next one runs; a check that breaks the
 * group (a timeout) makes the later ones fail fast.
 */
import type { ProcessGroup } from "../types.js";
import type { ConformanceCheck } from "./check.js";
import { DATA_CHECKS } from "./checks-data.js";
import { GROUP_CHECKS } from "./checks-groups.js";
import { RANDOM_CHECKS } from "./checks-random.js";
import { ERROR_CHECKS } from "./checks-errors.js";

/** Every check, in the order they run. */
export const CONFORMANCE_CHECKS: readonly ConformanceCheck[] = [...DATA_CHECKS, ...RANDOM_CHECKS, ...GROUP_CHECKS, ...ERROR_CHECKS];

export interface CheckResult {
  name: string;
  /** "skipped" when the group is smaller than the check's minSize. */
  status: "passed" | "failed" | "skipped";
  error?: string;
  ms: number;
}

export interface RunConformanceOptions {
  /** Names (or name prefixes such as "allToAll/") to run; default all. */
  only?: readonly string[];
  onResult?: (result: CheckResult) => void;
}

/** The checks `only` selects, in suite order. */
export function selectChecks(only?: readonly string[]): ConformanceCheck[] {
  if (!only) return [...CONFORMANCE_CHECKS];
  const picked = CONFORMANCE_CHECKS.filter((c) => only.some((o) => c.name === o || (o.endsWith("/") && c.name.startsWith(o))));
  const unknown = only.filter((o) => !CONFORMANCE_CHECKS.some((c) => c.name === o || (o.endsWith("/") && c.name.startsWith(o))));
  if (unknown.length) throw new Error(`unknown conformance checks: ${unknown.join(", ")}`);
  return picked;
}

export async function runConformance(group: ProcessGroup, options: RunConformanceOptions = {}): Promise<CheckResult[]> {
  const results: CheckResult[] = [];
  for (const check of selectChecks(options.only)) {
    const start = performance.now();
    let result: CheckResult;
    if (group.size < (check.minSize ?? 1)) {
      result = { name: check.name, status: "skipped", ms: 0 };
    } else {
      try {
        await check.run(group);
        result = { name: check.name, status: "passed", ms: performance.now() - start };
      } catch (e) {
        result = { name: check.name, status: "failed", error: e instanceof Error ? e.message : String(e), ms: performance.now() - start };
      }
    }
    results.push(result);
    options.onResult?.(result);
  }
  return results;
}
