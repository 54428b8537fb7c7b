/** The shape of one conformance check: every rank of a group runs it with the same group. */
import type { ProcessGroup } from "../types.js";

export interface ConformanceCheck {
  name: string;
  /** Smallest group size the check applies to (default 1). */
  minSize?: number;
  run(group: ProcessGroup): Promise<void>;
}
