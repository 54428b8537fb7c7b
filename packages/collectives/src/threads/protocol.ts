/**
 * The control plane between `launch` (main thread) and worker-main (one per
 * rank), carried by comlink: what a worker receives at start, what it exposes,
 * and what the main thread exposes back (sub-group buffers). Data never
 * travels this way; it moves through the shared buffers.
 */
import type { MessagePort } from "node:worker_threads";
import type { GroupResources, WorldResources } from "./shared-layout.js";

export interface WorkerStartData {
  rank: number;
  worldSize: number;
  /** File URL of the entry module (default export: setup). */
  entry: string;
  args: unknown;
  backend: string;
  timeoutMs: number;
  ortThreads: number;
  world: WorldResources;
  /** Extra options passed to the backend factory. */
  backendOptions: Record<string, unknown>;
}

/** What each worker exposes on its parent port. */
export interface WorkerControl {
  /** Imports the entry, creates the world group, runs setup; resolves with a port serving the rank's Api. */
  start(): Promise<MessagePort>;
  statsOf(): unknown;
  /** Releases the rank's Api (its `dispose`, if any) and group, then lets the worker exit on its own. */
  stop(): Promise<void>;
}

/** What the main thread exposes to each worker. */
export interface Coordinator {
  joinGroup(key: string, worldRanks: number[]): GroupResources;
}

/** The context every rank's setup receives. */
export interface RankContext<Args = unknown> {
  rank: number;
  worldSize: number;
  group: import("../types.js").ProcessGroup;
  args: Args;
  /** ONNX Runtime intra-op threads this rank should use: max(1, floor(cores / worldSize)) unless set. */
  ortThreads: number;
}

/** The default export of an entry module. */
export type RankSetup<Api extends object = object, Args = unknown> = (ctx: RankContext<Args>) => Api | Promise<Api>;
