/**
 * Waiting in the threads backend: spin for a few microseconds, then sleep on
 * this rank's wake word with Atomics.waitAsync, so the worker's event loop
 * keeps running (comlink calls, ONNX Runtime completions) while a collective
 * waits. Every wait ends in one of three ways: the condition holds, the world
 * was aborted (a peer failed: reject naming it), or the deadline passed (this
 * rank aborts the world naming the ranks that did not arrive, and rejects).
 */
import { availableParallelism } from "node:os";
import { CollectiveError } from "../errors.js";
import type { WorldControl } from "./shared-layout.js";

type WaitAsync = (
  words: Int32Array,
  index: number,
  value: number,
  timeoutMs?: number,
) => { async: false; value: string } | { async: true; value: Promise<string> };
const waitAsync = (Atomics as unknown as { waitAsync: WaitAsync }).waitAsync;

/** Milliseconds to spin before sleeping when every rank can have its own core (none when ranks outnumber cores: spinning would steal a peer's core). */
const SPIN_MS = 0.03;

/**
 * A rank whose heartbeat (a timer every HEARTBEAT_MS in its thread) is this
 * old, or half the collective timeout if that is less, is taken to be stuck in
 * compute when a wait times out.
 */
const STALE_MS = 1000;

/** How often a rank's thread records that its event loop runs (WorldControl.beat). */
export const HEARTBEAT_MS = 100;
const CORES = availableParallelism();

export interface WaitContext {
  world: WorldControl;
  /** This rank's world rank (whose wake word to sleep on). */
  worldRank: number;
  timeoutMs: number;
  /** "allToAll (call 3 on group of world ranks [0, 1])": the prefix of every error. */
  what: string;
}

/** The error every pending and later operation rejects with once the world is aborted. */
export function abortedError(world: WorldControl, what: string): CollectiveError {
  const failure = world.failure();
  return new CollectiveError(`${what}: aborted because ${failure?.reason ?? "the group failed"}`);
}

/**
 * Resolves when `ready()` holds. `missing()` names the world ranks still
 * awaited (for the timeout message); `waitingFor` says what they did not do.
 */
export async function waitUntil(ctx: WaitContext, ready: () => boolean, missing: () => number[], waitingFor: string): Promise<void> {
  const { world } = ctx;
  const index = world.wakeWordIndex(ctx.worldRank);
  const start = performance.now();
  const deadline = start + ctx.timeoutMs;
  const spinUntil = start + (world.worldSize <= CORES ? SPIN_MS : 0);
  for (;;) {
    if (world.aborted) throw abortedError(world, ctx.what);
    const seen = Atomics.load(world.words, index);
    if (ready()) return;
    const now = performance.now();
    if (now >= deadline) {
      const late = missing();
      let message = `${ctx.what}: world rank(s) ${late.join(", ")} did not ${waitingFor} within ${ctx.timeoutMs} ms (noticed by world rank ${ctx.worldRank})`;
      // The awaited rank may itself be waiting on another (a ring's chain of
      // neighbours): the world's failure names the rank that stopped running
      // its event loop, if one did, so the launcher can stop that one.
      const stuck = world.stalest(
        Array.from({ length: world.worldSize }, (_, r) => r).filter((r) => r !== ctx.worldRank),
        Math.min(STALE_MS, ctx.timeoutMs / 2),
      );
      const blamed = stuck?.rank ?? late[0] ?? -1;
      if (stuck !== null && !late.includes(stuck.rank))
        message += `; world rank ${stuck.rank} has not run its event loop for ${stuck.silentMs} ms (stuck in compute?)`;
      world.abort(blamed, message);
      throw new CollectiveError(message);
    }
    if (now < spinUntil) continue;
    const result = waitAsync(world.words, index, seen, deadline - now);
    if (result.async) await result.value;
  }
}
