/**
 * splitWorld: the sequence-parallel x data-parallel layout of a world, in the
 * torchtitan style (validated up front, a message naming every dimension).
 * World rank w = d * sp + s: SP groups hold consecutive ranks (same d), DP
 * groups hold ranks sp apart (same s).
 */
import { CollectiveError } from "./errors.js";
import type { ProcessGroup } from "./types.js";

export interface SplitWorld {
  /** This rank's sequence-parallel group (size sp). */
  sp: ProcessGroup;
  /** This rank's data-parallel group (size dp). */
  dp: ProcessGroup;
}

/** Collective over `group`: every rank calls it with the same sizes. */
export async function splitWorld(group: ProcessGroup, sizes: { sp: number; dp: number }): Promise<SplitWorld> {
  const { sp, dp } = sizes;
  if (!Number.isInteger(sp) || !Number.isInteger(dp) || sp < 1 || dp < 1 || sp * dp !== group.size) {
    throw new CollectiveError(`splitWorld: sp (${sp}) * dp (${dp}) must equal the world size (${group.size})`);
  }
  let spGroup: ProcessGroup | null = null;
  let dpGroup: ProcessGroup | null = null;
  for (let d = 0; d < dp; d++) {
    // SP group d: ranks [d*sp, d*sp + sp)
    const g = await group.newGroup(Array.from({ length: sp }, (_, s) => d * sp + s));
    spGroup ??= g;
  }
  for (let s = 0; s < sp; s++) {
    // DP group s: ranks s, s + sp, s + 2sp, ...
    const g = await group.newGroup(Array.from({ length: dp }, (_, d) => d * sp + s));
    dpGroup ??= g;
  }
  return { sp: spGroup!, dp: dpGroup! };
}
