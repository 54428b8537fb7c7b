/**
 * Bytes one rank sends per attention call (one layer), for every
 * sequence-parallel scheme: the exact formulas the tests check against the
 * groups' counters (`group.stats()`), and what tools/project and
 * `pnpm bench:schemes` report. float32 (4 bytes); b batch rows, D head
 * size, s_j rank j's tokens.
 *
 * - Ulysses over P ranks (head routing: |q_j| query heads and |kv_j| kv heads
 *   on rank j, kv heads repeated when kvHeads < P):
 *     forward  Σ_{j≠r} b·D·4·( s_r·(|q_j| + 2|kv_j|) + s_j·|q_r| )   (q, k, v out; out back)
 *     backward Σ_{j≠r} b·D·4·( s_r·|q_j| + s_j·(|q_r| + 2|kv_r|) )   (dOut out; dq, dk, dv back)
 * - ring: `ringForwardBytes` / `ringBackwardBytes` (ring-attention.ts).
 * - hybrid u x r: Ulysses over the u ranks of this rank's Ulysses group on
 *   their shards, plus ring over r ranks whose blocks are the Ulysses groups'
 *   tokens with this rank's |kv_i| kv heads.
 * - all-gather-KV: forward (P − 1)·s_r·2·b·Hkv·D·4 (all-gather), backward
 *   (N − s_r)·2·b·Hkv·D·4 (reduce-scatter of dk, dv).
 */
import type { HeadRouting } from "./head-routing.js";
import type { CallBytes } from "./scheme.js";
import { ringBackwardBytes, ringForwardBytes } from "./ring-attention.js";

/** Ulysses over `sizes.length` ranks with `routing` (headRouting(heads, kvHeads, P)). */
export function ulyssesBytes(routing: HeadRouting, sizes: readonly number[], rank: number, batch: number, headDim: number): CallBytes {
  const q = (j: number) => routing.q[j]!.count;
  const kv = (j: number) => routing.kv[j]!.length;
  let forward = 0;
  let backward = 0;
  for (let j = 0; j < sizes.length; j++) {
    if (j === rank) continue;
    forward += sizes[rank]! * (q(j) + 2 * kv(j)) + sizes[j]! * q(rank);
    backward += sizes[rank]! * q(j) + sizes[j]! * (q(rank) + 2 * kv(rank));
  }
  const floatBytes = batch * headDim * 4;
  return { forward: forward * floatBytes, backward: backward * floatBytes };
}

/** Ring over `sizes.length` ranks; `skipsFuture`: causal with the contiguous layout. */
export function ringBytes(sizes: readonly number[], rank: number, skipsFuture: boolean, batch: number, kvHeads: number, headDim: number): CallBytes {
  const tokenBytes = 2 * batch * kvHeads * headDim * 4;
  return { forward: ringForwardBytes(sizes, rank, skipsFuture, tokenBytes), backward: ringBackwardBytes(sizes, rank, skipsFuture, tokenBytes) };
}

/**
 * Hybrid u x r: SP rank p = g·u + i; `sizes` are the P ranks' token counts,
 * `routing` the head routing over u ranks.
 */
export function hybridBytes(
  routing: HeadRouting,
  sizes: readonly number[],
  rank: number,
  ringDegree: number,
  skipsFuture: boolean,
  batch: number,
  headDim: number,
): CallBytes {
  const u = sizes.length / ringDegree;
  const g = Math.floor(rank / u);
  const i = rank % u;
  const a2a = ulyssesBytes(routing, sizes.slice(g * u, g * u + u), i, batch, headDim);
  const groupSizes = Array.from({ length: ringDegree }, (_, j) => sizes.slice(j * u, j * u + u).reduce((n, s) => n + s, 0));
  const ring = ringBytes(groupSizes, g, skipsFuture, batch, routing.kv[i]!.length, headDim);
  return { forward: a2a.forward + ring.forward, backward: a2a.backward + ring.backward };
}

/** All-gather-KV over `sizes.length` ranks. */
export function allGatherKVBytes(sizes: readonly number[], rank: number, batch: number, kvHeads: number, headDim: number): CallBytes {
  const row = 2 * batch * kvHeads * headDim * 4;
  const total = sizes.reduce((n, s) => n + s, 0);
  return { forward: (sizes.length - 1) * sizes[rank]! * row, backward: (total - sizes[rank]!) * row };
}
