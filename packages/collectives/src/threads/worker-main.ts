/**
 * The bootstrap of one threads-backend rank (a worker thread started by
 * `launch`). It installs the shared world, imports the entry module (which may
 * register backends at top level), creates the world group with the chosen
 * backend, runs the entry's setup and serves the returned Api over comlink.
 * A method of the Api that throws marks this rank failed in shared memory, so
 * every peer's pending and later collectives reject at once. `stop` disposes
 * the Api and the group and closes the ports so the thread ends by itself
 * (never mid ONNX Runtime run).
 */
import { MessageChannel, parentPort, workerData, type MessagePort } from "node:worker_threads";
import { Comlink, nodeEndpoint } from "./comlink.js";
import { init } from "../registry.js";
import type { ProcessGroup } from "../types.js";
import { installThreadsWorld } from "./context.js";
import type { Coordinator, RankSetup, WorkerControl, WorkerStartData } from "./protocol.js";
import { WorldControl } from "./shared-layout.js";
import { HEARTBEAT_MS } from "./wait.js";

const data = workerData as WorkerStartData & { coordinator: MessagePort };
const world = new WorldControl(data.world.control, data.worldSize);
// the heartbeat peers read when a wait times out, to name a rank stuck in compute rather than one waiting on it
world.beat(data.rank);
setInterval(() => world.beat(data.rank), HEARTBEAT_MS).unref();
const coordinator = Comlink.wrap<Coordinator>(nodeEndpoint(data.coordinator));
installThreadsWorld({
  resources: data.world,
  worldRank: data.rank,
  timeoutMs: data.timeoutMs,
  joinGroup: (key, worldRanks) => coordinator.joinGroup(key, worldRanks) as never,
});

let group: ProcessGroup | null = null;
let api: Record<string, unknown> | null = null;
const ports: MessagePort[] = [data.coordinator];

function describe(e: unknown): string {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}

/** Wraps every method so that a throw marks this rank failed for the whole world. */
function guard(target: Record<string, unknown>): Record<string, unknown> {
  const guarded: Record<string, unknown> = {};
  for (const name of new Set([...Object.keys(target), ...Object.getOwnPropertyNames(Object.getPrototypeOf(target))])) {
    const member = target[name];
    if (typeof member !== "function" || name === "constructor") continue;
    guarded[name] = async (...args: unknown[]) => {
      try {
        return await (member as (...a: unknown[]) => unknown).apply(target, args);
      } catch (e) {
        world.abort(data.rank, `rank ${data.rank} failed in ${name}: ${describe(e)}`);
        throw e;
      }
    };
  }
  return guarded;
}

const control: WorkerControl = {
  async start() {
    try {
      const module = (await import(data.entry)) as { default?: unknown };
      if (typeof module.default !== "function") throw new Error(`entry ${data.entry} has no default export setup(ctx)`);
      group = await init({ backend: data.backend, timeoutMs: data.timeoutMs, ...data.backendOptions });
      const setup = module.default as RankSetup;
      api = (await setup({ rank: data.rank, worldSize: data.worldSize, group, args: data.args, ortThreads: data.ortThreads })) as Record<string, unknown>;
      if (api === null || typeof api !== "object") throw new Error(`setup of ${data.entry} returned ${String(api)}, not an object of methods`);
    } catch (e) {
      world.abort(data.rank, `rank ${data.rank} failed to start: ${describe(e)}`);
      throw e;
    }
    const channel = new MessageChannel();
    ports.push(channel.port1);
    Comlink.expose(guard(api), nodeEndpoint(channel.port1));
    return Comlink.transfer(channel.port2, [channel.port2 as never]) as MessagePort;
  },
  statsOf() {
    return group?.stats() ?? null;
  },
  async stop() {
    const dispose = api?.dispose;
    try {
      if (typeof dispose === "function") await (dispose as () => unknown).call(api);
    } finally {
      await group?.destroy().catch(() => undefined);
      // Let comlink answer this call, then close every port: the thread then
      // ends once its pending native work (e.g. an ONNX Runtime run) is done.
      setTimeout(() => {
        for (const port of ports) port.close();
        parentPort?.close();
      }, 0);
    }
  },
};

Comlink.expose(control, nodeEndpoint(parentPort));
