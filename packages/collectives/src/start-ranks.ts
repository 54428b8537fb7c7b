/**
 * Starts the ranks of a world on any backend and drives them from this
 * process. The program is SPMD: an entry module's default export,
 * `setup(ctx) => Api`, runs once per rank with that rank's world group, and
 * the caller calls the Api's methods on every rank it holds:
 * - `threads`: every rank in a worker thread of this process (`launch`),
 *   supervised (a failing or stuck rank is named: RankSupervisor);
 * - `local`: every rank in this thread on the local (reference) backend;
 * - any other backend (`mpi`, a module path): this process is one rank of a
 *   world started outside (mpirun, the user's launcher); the other
 *   processes run the same program, and this one holds its own rank only.
 */
import { availableParallelism } from "node:os";
import { pathToFileURL } from "node:url";
import { CollectiveError } from "./errors.js";
import { localRanksOnHost } from "./launcher-env.js";
import { createLocalGroups } from "./local/local-group.js";
import { init } from "./registry.js";
import { launch, type Method } from "./threads/launch.js";
import type { RankSetup } from "./threads/protocol.js";
import { RankSupervisor, type SuperviseOptions } from "./threads/supervisor.js";
import type { ProcessGroup } from "./types.js";

export interface StartRanksOptions<Args> {
  /** threads | local | a registered backend name or module path whose world a launcher started. */
  backend: string;
  /** The world's size for threads and local (a launcher's world has the size it was given). */
  worldSize: number;
  /** Module path or URL whose default export is the rank's setup (see launch for TypeScript entries). */
  entry: string | URL;
  /** The entry may be TypeScript (threads: tsx in every worker; see launch). */
  typescript?: boolean;
  args: Args;
  /** Collective timeout in each rank, also the supervisor's bound on a stuck rank. */
  timeoutMs: number;
  /** ONNX Runtime threads per rank (default max(1, floor(cores / ranks on this host))). */
  ortThreadsPerRank?: number;
}

/** The ranks of a world, as this process holds them. */
export interface RankWorld<Api extends object> {
  readonly worldSize: number;
  /** The world ranks this process holds (every rank, or its own under a launcher), ascending. */
  readonly ranks: readonly number[];
  /** Calls `method` on every rank this process holds; results in rank order. Rejects naming the rank to blame. */
  call<K extends keyof Api>(method: K, args: Method<Api, K>["args"], options?: SuperviseOptions): Promise<Method<Api, K>["result"][]>;
  /** World rank 0's Api, or null when another process holds it. */
  leader(): { [K in keyof Api]: (...args: Method<Api, K>["args"]) => Promise<Method<Api, K>["result"]> } | null;
  /** Calls `method` (the ranks' release) on every rank, then stops them. */
  close(method: keyof Api): Promise<void>;
}

/** Starts the world's ranks (see the module comment); a rank whose setup fails rejects the start, naming it. */
export async function startRanks<Api extends object, Args = unknown>(options: StartRanksOptions<Args>): Promise<RankWorld<Api>> {
  const { backend, worldSize, timeoutMs, args } = options;
  if (backend === "threads") {
    const world = await launch<Api, Args>({
      worldSize,
      entry: options.entry,
      ...(options.typescript === undefined ? {} : { typescript: options.typescript }),
      args,
      timeoutMs,
      ...(options.ortThreadsPerRank === undefined ? {} : { ortThreadsPerRank: options.ortThreadsPerRank }),
    });
    const supervisor = new RankSupervisor(world, timeoutMs);
    return {
      worldSize,
      ranks: Array.from({ length: worldSize }, (_, r) => r),
      call: (method, callArgs, callOptions) => supervisor.call(method, callArgs, callOptions),
      leader: () => world.rank(0) as unknown as ReturnType<RankWorld<Api>["leader"]>,
      close: (method) => supervisor.close(method),
    };
  }
  const entry = options.entry instanceof URL ? options.entry.href : pathToFileURL(options.entry).href;
  const setup = ((await import(entry)) as { default: RankSetup<Api, Args> }).default;
  if (typeof setup !== "function") throw new CollectiveError(`entry '${entry}' has no default export setup(ctx)`);
  const groups: ProcessGroup[] = backend === "local" ? createLocalGroups(worldSize, { timeoutMs }) : [await init({ backend, timeoutMs })];
  const onHost = backend === "local" ? worldSize : localRanksOnHost();
  const ortThreads = options.ortThreadsPerRank ?? Math.max(1, Math.floor(availableParallelism() / onHost));
  const apis = await Promise.all(
    groups.map(async (group) => {
      try {
        return await setup({ rank: group.rank, worldSize: group.size, group, args, ortThreads });
      } catch (cause) {
        throw new CollectiveError(`rank ${group.rank} failed to start: ${(cause as Error).message}`, { cause });
      }
    }),
  );
  const ranks = groups.map((g) => g.rank);
  const invoke = (api: Api, method: keyof Api, callArgs: readonly unknown[]) => (api[method] as (...a: unknown[]) => unknown)(...callArgs);
  return {
    worldSize: groups[0]!.size,
    ranks,
    call: (method, callArgs) =>
      Promise.all(
        apis.map(async (api, i) => {
          try {
            return await invoke(api, method, callArgs as readonly unknown[]);
          } catch (cause) {
            throw new CollectiveError(`rank ${ranks[i]} failed: ${(cause as Error).message ?? String(cause)}`, { cause });
          }
        }),
      ) as Promise<never[]>,
    leader: () => {
      const api = apis[ranks.indexOf(0)];
      if (api === undefined) return null;
      return new Proxy(
        {},
        {
          get:
            (_, method) =>
            async (...a: unknown[]) =>
              invoke(api, method as keyof Api, a),
        },
      ) as ReturnType<RankWorld<Api>["leader"]>;
    },
    close: async (method) => {
      await Promise.allSettled(apis.map((api) => invoke(api, method, [])));
    },
  };
}
