/**
 * Hybrid Ulysses x ring (USP): Ulysses inside groups of u consecutive SP
 * ranks, ring attention across the r = sp / u groups. The degrees default to
 * u = gcd(sp, kvHeads) when neither is given.
 */
import { splitWorld } from "@ulysses/collectives";
import { HybridAttention } from "../hybrid-attention.js";
import { headRouting } from "../head-routing.js";
import { ParallelError } from "../errors.js";
import type { SequenceParallelScheme } from "../scheme.js";
import { hybridBytes } from "../scheme-bytes.js";

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}

function fmt(x: number): string {
  return Number.isInteger(x) ? String(x) : x.toFixed(3);
}

export const hybridScheme: SequenceParallelScheme = {
  name: "hybrid",
  settings: ["ulyssesDegree", "ringDegree"],
  resolve(options, kvHeads) {
    const { sp } = options;
    if (options.ulyssesDegree !== undefined) return { ulyssesDegree: options.ulyssesDegree, ringDegree: options.ringDegree ?? sp / options.ulyssesDegree };
    if (options.ringDegree !== undefined) return { ulyssesDegree: sp / options.ringDegree, ringDegree: options.ringDegree };
    const u = gcd(sp, kvHeads);
    return { ulyssesDegree: u, ringDegree: sp / u };
  },
  problems(options, shape, { ulyssesDegree: u, ringDegree: r }, n) {
    if (!Number.isInteger(u) || u < 1 || !Number.isInteger(r) || r < 1 || u * r !== options.sp)
      return [`${n.ulyssesDegree} ${fmt(u)} x ${n.ringDegree} ${fmt(r)} must be positive integers whose product is ${n.sp} ${options.sp}`];
    if (shape.heads < u)
      return [`${n.heads} ${shape.heads} is smaller than ${n.ulyssesDegree} ${u}: Ulysses gives every rank of its group at least one attention head`];
    return [];
  },
  headRanks: (degrees) => degrees.ulyssesDegree,
  async groups(spGroup, degrees) {
    const split = await splitWorld(spGroup, { sp: degrees.ulyssesDegree, dp: degrees.ringDegree });
    return { ulysses: split.sp, ring: split.dp };
  },
  create(local, { group, groups }) {
    const { ulysses, ring } = groups;
    if (ulysses === undefined || ring === undefined)
      throw new ParallelError("hybrid attention needs its Ulysses and ring subgroups (ParallelDims.create builds them)");
    return new HybridAttention(local, group, ulysses, ring);
  },
  bytes: ({ sizes, rank, batch, heads, kvHeads, headDim, degrees, skipsFuture }) =>
    hybridBytes(headRouting(heads, kvHeads, degrees.ulyssesDegree), sizes, rank, degrees.ringDegree, skipsFuture && degrees.ringDegree > 1, batch, headDim),
  memory: ({ kvHeads, headDim, degrees }) => ({
    // the ring runs on the Ulysses group's tokens with the group's (replicated) kv heads: three blocks of them
    kvWidth: 3 * Math.max(kvHeads, degrees.ulyssesDegree) * headDim,
    exchangeAreas: true,
    travels: (degrees.ulyssesDegree - 1) / degrees.ulyssesDegree,
    chunked: true,
  }),
  describe: ({ ulyssesDegree, ringDegree }, layout) => `hybrid attention (Ulysses ${ulyssesDegree} x ring ${ringDegree}, ${layout} layout)`,
};
