import { describe, expect, it } from "vitest";
import { OP_KINDS, type CommStats, type OpKind, type OpStats } from "@ulysses/collectives";
import { commDelta, commSnapshot } from "./comm-delta.js";

const op = (calls: number, bytesSent: number, timeMs: number): OpStats => ({ calls, bytesSent, bytesReceived: 2 * bytesSent, elements: 0, timeMs });

/** Stats with the given per-op counters; the total is their sum (as a group keeps them). */
function stats(byOp: Partial<Record<OpKind, OpStats>>): CommStats {
  const full = Object.fromEntries(OP_KINDS.map((kind) => [kind, byOp[kind] ?? op(0, 0, 0)])) as Record<OpKind, OpStats>;
  const total = Object.values(full).reduce((sum, o) => op(sum.calls + o.calls, sum.bytesSent + o.bytesSent, sum.timeMs + o.timeMs), op(0, 0, 0));
  return { byOp: full, total };
}

describe("commDelta", () => {
  it("sums the growth of every group's totals", () => {
    const world = [stats({ allReduce: op(1, 100, 2) }), stats({ allReduce: op(3, 400, 5), barrier: op(1, 0, 0.5) })];
    const sp = [stats({ allToAll: op(2, 10, 1) }), stats({ allToAll: op(6, 50, 4) })];
    // world: 3 calls, 300 bytes, 3.5 ms; sp: 4 calls, 40 bytes, 3 ms
    expect(commDelta([world[0]!, sp[0]!], [world[1]!, sp[1]!])).toEqual({ calls: 7, bytesSent: 340, bytesReceived: 680, timeMs: 6.5 });
  });

  it("counts only the operations asked for, and takes one snapshot as one group", () => {
    const before = stats({ allToAll: op(1, 8, 1), allReduce: op(1, 100, 10) });
    const after = stats({ allToAll: op(5, 40, 3), allGather: op(2, 6, 1), allReduce: op(2, 200, 30) });
    expect(commDelta(before, after, ["allToAll", "allGather", "reduceScatter"])).toEqual({ calls: 6, bytesSent: 38, bytesReceived: 76, timeMs: 3 });
    expect(commDelta(before, after, ["allReduce"]).bytesSent).toBe(100);
  });

  it("snapshots groups with stats()", () => {
    const fixed = stats({ send: op(1, 4, 1) });
    expect(commSnapshot([{ stats: () => fixed }])).toEqual([fixed]);
  });

  it("refuses snapshots that do not pair up or went backwards", () => {
    const a = stats({ allToAll: op(2, 10, 1) });
    const reset = stats({});
    expect(() => commDelta([a, a], [a])).toThrow("2 snapshots before but 1 after");
    expect(() => commDelta([a], [reset])).toThrow("group 0 total.calls went down from 2 to 0 (stats reset between the snapshots?)");
  });
});
