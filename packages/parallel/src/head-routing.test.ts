import { describe, expect, it } from "vitest";
import { ParallelError } from "./errors.js";
import { headRouting } from "./head-routing.js";
import { sequenceShards } from "./sequence-shards.js";

/** Checks, head by head, that every rank's local GQA rule picks the right global kv head. */
function expectLocalGqaRule(heads: number, kvHeads: number, p: number): void {
  const routing = headRouting(heads, kvHeads, p);
  const group = heads / kvHeads;
  let covered = 0;
  for (let r = 0; r < p; r++) {
    const { start, count } = routing.q[r]!;
    expect(start).toBe(covered);
    covered += count;
    const kv = routing.kv[r]!;
    expect(count % kv.length).toBe(0);
    const localGroup = count / kv.length;
    for (let i = 0; i < count; i++) expect(kv[Math.floor(i / localGroup)]).toBe(Math.floor((start + i) / group));
  }
  expect(covered).toBe(heads);
}

describe("headRouting", () => {
  it("splits 6 heads over 4 ranks as 2, 2, 1, 1", () => {
    const routing = headRouting(6, 6, 4);
    expect(routing.q.map((r) => r.count)).toEqual([2, 2, 1, 1]);
    expect(routing.kv).toEqual([[0, 1], [2, 3], [4], [5]]);
    expect(routing.replicatedKv).toBe(false);
  });

  it("splits kv heads like q heads when both divide", () => {
    const routing = headRouting(8, 4, 4);
    expect(routing.kv).toEqual([[0], [1], [2], [3]]);
    expect(routing.replicatedKv).toBe(false);
  });

  it("replicates kv heads when there are fewer than ranks (kv=2, P=4)", () => {
    const routing = headRouting(8, 2, 4);
    // q heads {0,1},{2,3} use kv 0; {4,5},{6,7} use kv 1.
    expect(routing.kv).toEqual([[0], [0], [1], [1]]);
    expect(routing.replicatedKv).toBe(true);
  });

  it("gives one kv copy per q head when a rank's q heads straddle kv groups unevenly", () => {
    // 8 heads over 3 ranks: 3, 3, 2; group 4; rank 1 holds q 3 (kv 0) and q 4, 5 (kv 1).
    const routing = headRouting(8, 2, 3);
    expect(routing.kv[1]).toEqual([0, 1, 1]);
    expect(routing.kv[0]).toEqual([0]);
  });

  it("obeys the local GQA rule for every small configuration", () => {
    for (let heads = 1; heads <= 12; heads++) {
      for (let kvHeads = 1; kvHeads <= heads; kvHeads++) {
        if (heads % kvHeads !== 0) continue;
        for (let p = 1; p <= heads; p++) expectLocalGqaRule(heads, kvHeads, p);
      }
    }
  });

  it("rejects impossible configurations naming the values", () => {
    expect(() => headRouting(4, 4, 5)).toThrow(ParallelError);
    expect(() => headRouting(4, 4, 5)).toThrow(/4 heads cannot be split over 5 ranks/);
    expect(() => headRouting(6, 4, 2)).toThrow(/heads \(6\) must be a multiple of kvHeads \(4\)/);
  });
});

describe("sequenceShards", () => {
  it("splits 1000 tokens over 3 ranks as 334, 333, 333", () => {
    const shards = sequenceShards(333, 2, 3, { seqLength: 1000 });
    expect(shards.sizes).toEqual([334, 333, 333]);
    expect(shards.starts).toEqual([0, 334, 667]);
    expect(shards.length).toBe(1000);
  });

  it("defaults to equal shards and rejects a local length that does not fit", () => {
    expect(sequenceShards(5, 1, 4).sizes).toEqual([5, 5, 5, 5]);
    expect(() => sequenceShards(334, 2, 3, { seqLength: 1000 })).toThrow(/rank 2 holds 334 tokens but the shard sizes \[334, 333, 333\]/);
    expect(() => sequenceShards(1, 2, 4, { seqLength: 3 })).toThrow(ParallelError);
  });
});
