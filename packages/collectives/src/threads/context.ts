/**
 * How a threads-backend rank finds its world. Inside a worker started by
 * `launch`, worker-main installs the world (shared buffers, rank, a way to ask
 * the main thread for a sub-group's buffers) before the entry runs, and
 * `createThreadsGroup` returns that world's group. Anywhere else (a plain
 * script, a test) it makes a fresh single-rank world in this thread.
 */
import { CollectiveError } from "../errors.js";
import type { BackendInitOptions, ProcessGroup } from "../types.js";
import { DEFAULT_MAX_MESSAGE_BYTES, WorldControl, createGroupResources, type GroupResources, type WorldResources } from "./shared-layout.js";
import { ThreadsGroup, type ThreadsRuntime } from "./threads-group.js";

export const DEFAULT_TIMEOUT_MS = 10_000;

interface InstalledWorld {
  resources: WorldResources;
  worldRank: number;
  timeoutMs: number;
  joinGroup(key: string, worldRanks: number[]): Promise<GroupResources>;
  group?: ProcessGroup;
}

let installed: InstalledWorld | null = null;

/** Called by worker-main before the entry module runs. */
export function installThreadsWorld(world: Omit<InstalledWorld, "group">): void {
  installed = { ...world };
}

function timeoutOf(options: BackendInitOptions, fallback: number): number {
  const timeoutMs = options.timeoutMs ?? fallback;
  if (typeof timeoutMs !== "number" || !(timeoutMs > 0)) throw new CollectiveError(`timeoutMs ${String(timeoutMs)} must be a positive number`);
  return timeoutMs;
}

/** The backend factory registered as "threads". */
export async function createThreadsGroup(options: BackendInitOptions = {}): Promise<ProcessGroup> {
  if (installed) {
    if (!installed.group) {
      const runtime: ThreadsRuntime = {
        world: new WorldControl(installed.resources.control, installed.resources.worldSize),
        worldRank: installed.worldRank,
        timeoutMs: timeoutOf(options, installed.timeoutMs),
        joinGroup: installed.joinGroup,
      };
      installed.group = new ThreadsGroup(runtime, installed.resources.group, installed.worldRank);
    }
    return installed.group;
  }
  const max = typeof options.maxMessageBytes === "number" ? options.maxMessageBytes : DEFAULT_MAX_MESSAGE_BYTES;
  const groups = new Map<string, GroupResources>();
  const runtime: ThreadsRuntime = {
    world: WorldControl.create(1),
    worldRank: 0,
    timeoutMs: timeoutOf(options, DEFAULT_TIMEOUT_MS),
    joinGroup: async (key, worldRanks) => {
      if (!groups.has(key)) groups.set(key, createGroupResources(key, worldRanks, max));
      return groups.get(key)!;
    },
  };
  return new ThreadsGroup(runtime, createGroupResources("world", [0], max), 0);
}
