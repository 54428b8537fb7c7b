/**
 * Communication over an interval, from the collectives' own accounting:
 * snapshots of `group.stats()` taken before and after (one per group, e.g.
 * the world and the SP group of a rank), and the sum over the groups of what
 * grew in between: calls, bytes sent and received, and the time spent inside
 * collectives (which includes waiting for slower peers). Optionally only some
 * operations (e.g. the attention's all-to-alls apart from the gradient
 * all-reduce). Snapshots replace `resetStats()`, which would also clear what
 * other code is counting.
 */
import type { CommStats, OpKind, OpStats } from "@ulysses/collectives";
import { MeasureError } from "./errors.js";

/** What grew between two snapshots, summed over the groups (and the operations asked for). */
export type CommDelta = Pick<OpStats, "calls" | "bytesSent" | "bytesReceived" | "timeMs">;

const FIELDS = ["calls", "bytesSent", "bytesReceived", "timeMs"] as const;

/** One snapshot per group: `groups.map((g) => g.stats())`. */
export function commSnapshot(groups: readonly { stats(): CommStats }[]): CommStats[] {
  return groups.map((group) => group.stats());
}

/**
 * `after` minus `before`, group by group (the i-th snapshot of each belongs
 * to the same group), summed; over `ops` only when given, else the groups'
 * totals. A single snapshot may be passed for one group. Throws a
 * MeasureError when the counts of the two lists differ or a counter went
 * down (the stats were reset in between).
 */
export function commDelta(before: CommStats | readonly CommStats[], after: CommStats | readonly CommStats[], ops?: readonly OpKind[]): CommDelta {
  const first = Array.isArray(before) ? (before as readonly CommStats[]) : [before as CommStats];
  const second = Array.isArray(after) ? (after as readonly CommStats[]) : [after as CommStats];
  if (first.length !== second.length)
    throw new MeasureError(`commDelta: ${first.length} snapshots before but ${second.length} after; pass one per group to both`);
  const sum: CommDelta = { calls: 0, bytesSent: 0, bytesReceived: 0, timeMs: 0 };
  first.forEach((start, group) => {
    const end = second[group]!;
    const parts: [string, OpStats, OpStats][] = ops === undefined ? [["total", start.total, end.total]] : ops.map((op) => [op, start.byOp[op], end.byOp[op]]);
    for (const [name, a, b] of parts) {
      if (a === undefined || b === undefined) throw new MeasureError(`commDelta: group ${group} has no stats for '${name}'`);
      for (const field of FIELDS) {
        const grown = b[field] - a[field];
        if (grown < 0)
          throw new MeasureError(`commDelta: group ${group} ${name}.${field} went down from ${a[field]} to ${b[field]} (stats reset between the snapshots?)`);
        sum[field] += grown;
      }
    }
  });
  return sum;
}
