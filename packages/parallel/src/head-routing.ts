/**
 * Which attention heads each rank of a Ulysses group owns after the
 * all-to-all. Query heads are split into contiguous ranges by
 * `evenSplitSizes` (6 heads on 4 ranks -> 2, 2, 1, 1). Each rank then receives
 * the key/value heads its query heads use (grouped-query attention: query head
 * h uses kv head floor(h / group), group = heads / kvHeads):
 *
 * - kvHeads divisible like the query heads: each rank gets its own kv range.
 * - fewer kv heads than ranks (or ranges that share a kv head): the kv head is
 *   replicated on every rank that needs it; backward sums the copies' gradients.
 * - a query range that covers parts of two kv groups unevenly (8 heads, 2 kv
 *   heads, 3 ranks -> rank 1 holds q 3 (kv 0) and q 4, 5 (kv 1)): the local
 *   kernel needs equal groups, so that rank gets one kv copy per query head.
 *
 * Every rank's local layout obeys the LocalAttention GQA rule: local query
 * head i uses local kv head floor(i / (localHeads / localKvHeads)).
 * Pure arithmetic; no communication.
 */
import { evenSplitSizes } from "@ulysses/tensors";
import { ParallelError } from "./errors.js";

export interface HeadRange {
  readonly start: number;
  readonly count: number;
}

export interface HeadRouting {
  readonly heads: number;
  readonly kvHeads: number;
  readonly worldSize: number;
  /** Query heads owned by each rank (contiguous). */
  readonly q: readonly HeadRange[];
  /** Global kv head indices each rank receives, in local order (may repeat across ranks). */
  readonly kv: readonly (readonly number[])[];
  /**
   * True when some kv head has more than one copy: on two ranks, or twice on
   * one (a rank with one kv copy per query head). False: every kv head is held
   * exactly once, so its gradient has one copy to send back and nothing to sum.
   */
  readonly replicatedKv: boolean;
}

/** Validates the head configuration for `worldSize` ranks (throws ParallelError naming the values). */
export function checkHeads(heads: number, kvHeads: number, worldSize: number): void {
  if (!Number.isInteger(heads) || heads < 1 || !Number.isInteger(kvHeads) || kvHeads < 1) {
    throw new ParallelError(`heads (${heads}) and kvHeads (${kvHeads}) must be positive integers`);
  }
  if (heads % kvHeads !== 0) {
    throw new ParallelError(`heads (${heads}) must be a multiple of kvHeads (${kvHeads}) for grouped-query attention`);
  }
  if (!Number.isInteger(worldSize) || worldSize < 1) throw new ParallelError(`group size ${worldSize} must be a positive integer`);
  if (worldSize > heads) {
    throw new ParallelError(`Ulysses needs at least one query head per rank: ${heads} heads cannot be split over ${worldSize} ranks`);
  }
}

/** The kv heads rank-local query heads [start, start+count) need, in a layout the local kernel accepts. */
function kvForRange(range: HeadRange, group: number): number[] {
  const kvOf = (h: number) => Math.floor(h / group);
  const first = kvOf(range.start);
  const last = kvOf(range.start + range.count - 1);
  const distinct = last - first + 1;
  let uniform = range.count % distinct === 0;
  if (uniform) {
    const localGroup = range.count / distinct;
    for (let i = 0; i < range.count && uniform; i++) uniform = kvOf(range.start + i) === first + Math.floor(i / localGroup);
  }
  if (uniform) return Array.from({ length: distinct }, (_, i) => first + i);
  // One kv copy per query head: local group size 1.
  return Array.from({ length: range.count }, (_, i) => kvOf(range.start + i));
}

/** Routings made so far, by (heads, kvHeads, worldSize): the wrappers ask for one on every call. */
const routings = new Map<string, HeadRouting>();

/** The head routing of `heads` / `kvHeads` over `worldSize` ranks (immutable; made once per configuration). */
export function headRouting(heads: number, kvHeads: number, worldSize: number): HeadRouting {
  const key = `${heads}/${kvHeads}/${worldSize}`;
  let routing = routings.get(key);
  if (routing === undefined) {
    routing = makeRouting(heads, kvHeads, worldSize);
    routings.set(key, routing);
  }
  return routing;
}

function makeRouting(heads: number, kvHeads: number, worldSize: number): HeadRouting {
  checkHeads(heads, kvHeads, worldSize);
  const group = heads / kvHeads;
  const sizes = evenSplitSizes(heads, worldSize);
  const q: HeadRange[] = [];
  let start = 0;
  for (const count of sizes) {
    q.push({ start, count });
    start += count;
  }
  const kv = q.map((range) => kvForRange(range, group));
  const owners = new Array<number>(kvHeads).fill(0);
  for (const list of kv) for (const h of list) owners[h]!++;
  return { heads, kvHeads, worldSize, q, kv, replicatedKv: owners.some((n) => n > 1) };
}
