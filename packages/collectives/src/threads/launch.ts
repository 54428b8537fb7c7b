/**
 * `launch`: starts a world of `worldSize` ranks as worker threads of this
 * process, each running `entry`'s setup with its world group, and drives them
 * from the main thread (comlink control plane; data moves through shared
 * memory). It also watches the ranks: a worker that errors or exits marks the
 * world failed in shared memory, so every peer's collectives reject at once
 * naming it, and calls from here reject instead of hanging. Shutdown asks the
 * ranks to stop and waits for them to exit by themselves; `terminate` is the
 * last resort after `shutdownTimeoutMs` (terminating a worker inside an ONNX
 * Runtime run aborts the whole process).
 *
 * Every worker runs the same copy of this package as the code that called
 * `launch`, so a rank has one module instance (one backend registry, one
 * threads world, one CollectiveError class) whichever way its entry imports
 * `@ulysses/collectives`:
 * - compiled (this file is dist/threads/launch.js, an installed package): the
 *   worker runs dist/threads/worker-main.js with plain node. It inherits the
 *   parent's execArgv as Node does, less a `@ulysses/source` condition (that
 *   would resolve the entry's imports to src/ and make a second instance). No
 *   tsx unless `typescript: true`, which registers tsx (resolved from the
 *   entry's side: its folder, then the cwd, then this package) so the entry
 *   may be TypeScript; a TypeScript entry without it fails up front.
 * - from source (this file is .ts: the monorepo, under vitest or tsx): the
 *   worker main is TypeScript itself, so workers get the `@ulysses/source`
 *   condition and register tsx (resolved from this package) in their bootstrap.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { availableParallelism } from "node:os";
import { dirname, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { MessageChannel, Worker, type MessagePort } from "node:worker_threads";
import { CollectiveError } from "../errors.js";
import type { CommStats } from "../types.js";
import { Comlink, nodeEndpoint, type Remote } from "./comlink.js";
import { DEFAULT_TIMEOUT_MS } from "./context.js";
import type { Coordinator, WorkerControl, WorkerStartData } from "./protocol.js";
import { DEFAULT_MAX_MESSAGE_BYTES, WorldControl, createGroupResources, type GroupResources } from "./shared-layout.js";

export interface LaunchOptions<Args = unknown> {
  worldSize: number;
  /** Backend each rank initialises (a registered name or module path; default "threads"). */
  backend?: string;
  /**
   * Module path or URL whose default export is `setup(ctx) => Api`. Plain
   * .js/.mjs always works; a .ts/.mts/.cts entry needs `typescript` when
   * launch runs from the compiled package.
   */
  entry: string | URL;
  /**
   * Registers tsx in every worker so the entry (and a backend module path) may
   * be TypeScript. tsx is resolved from the entry's folder, then the cwd, then
   * this package; install it there (`npm i -D tsx`). The workers still run
   * this package's compiled code (no `@ulysses/source` condition is added).
   * Default: false for the compiled package; from source (this monorepo) the
   * worker main is TypeScript itself, so tsx is always registered and this
   * option changes nothing.
   */
  typescript?: boolean;
  args?: Args;
  /** Collective timeout in each rank (default 10 000 ms). */
  timeoutMs?: number;
  /** ONNX Runtime threads per rank (default max(1, floor(cores / worldSize))). */
  ortThreadsPerRank?: number;
  /** How long shutdown waits for ranks to exit by themselves before terminating them (default 30 000 ms). */
  shutdownTimeoutMs?: number;
  /** Largest message one rank may stage (default 1 GiB). */
  maxMessageBytes?: number;
  /** Extra options for the backend factory. */
  backendOptions?: Record<string, unknown>;
}

/** A method of a rank's Api: its arguments and its awaited result. */
export type Method<Api, K extends keyof Api> = Api[K] extends (...args: infer A) => infer R ? { args: A; result: Awaited<R> } : never;

export interface LaunchedWorld<Api extends object> {
  readonly worldSize: number;
  /** Calls `method` on every rank; results in rank order. Rejects naming the failed rank when any rank fails. */
  all<K extends keyof Api>(method: K, ...args: Method<Api, K>["args"]): Promise<Method<Api, K>["result"][]>;
  /** Rank r's Api (calls reject if the rank's worker dies). */
  rank(r: number): Remote<Api>;
  /** Each rank's world-group stats, in rank order. */
  stats(): Promise<CommStats[]>;
  /** The first failure recorded in shared memory, if any. */
  failure(): { rank: number; reason: string } | null;
  /**
   * Marks the world failed as if `rank` had failed with `reason`, so every
   * pending and later collective rejects on every rank (a watchdog's verdict,
   * e.g. a rank that stopped making progress). The first failure recorded wins.
   */
  abort(rank: number, reason: string): void;
  /** Workers not yet exited. */
  liveWorkers(): number;
  /** Stops every rank (see module comment and ShutdownOptions); resolves with the exit codes. */
  shutdown(options?: ShutdownOptions): Promise<number[]>;
}

export interface ShutdownOptions {
  /**
   * Ranks to terminate at once instead of asking them to stop: ranks known to
   * be stuck (their thread never returns to its event loop, so they cannot
   * answer). Terminating a rank inside an ONNX Runtime run of
   * onnxruntime-node aborts the process: name only ranks stuck elsewhere.
   */
  terminate?: readonly number[];
  /** Overrides LaunchOptions.shutdownTimeoutMs for this call. */
  timeoutMs?: number;
}

const TS_FILE = /\.[mc]?ts$/;
const SOURCE_CONDITION = "@ulysses/source";
/** True when this file is TypeScript (the monorepo, under vitest or tsx), false when it is the compiled dist/. */
const fromSource = TS_FILE.test(new URL(import.meta.url).pathname);
const workerFile = new URL(fromSource ? "./worker-main.ts" : "./worker-main.js", import.meta.url);

// Node 20 applies no `--import tsx` hooks inside a worker: the bootstrap
// registers tsx's loader itself, then imports the worker main.
function bootstrap(tsxApi: string | null): string {
  const main = JSON.stringify(workerFile.href);
  return tsxApi === null ? `import(${main});` : `import(${JSON.stringify(tsxApi)}).then((tsx) => { tsx.register(); return import(${main}); });`;
}

function resolveFromHere(specifier: string): string {
  try {
    return import.meta.resolve(specifier);
  } catch {
    return specifier;
  }
}

/** The ESM entry of `tsx/esm/api` as seen from `base` (a file URL or path), or null. */
function resolveTsxFrom(base: string): string | null {
  try {
    const require = createRequire(base);
    const manifest = require.resolve("tsx/package.json");
    const api = (JSON.parse(readFileSync(manifest, "utf8")) as { exports?: Record<string, unknown> }).exports?.["./esm/api"] as
      | { import?: string | { default?: string } }
      | undefined;
    const file = typeof api?.import === "string" ? api.import : api?.import?.default;
    return pathToFileURL(file ? join(dirname(manifest), file) : require.resolve("tsx/esm/api")).href;
  } catch {
    return null;
  }
}

/** tsx for `typescript: true` from the compiled package: the entry's folder, the cwd, then this package. */
function resolveCallerTsx(entry: string): string {
  const bases = [entry, join(process.cwd(), "launch-entry.js"), import.meta.url];
  for (const base of bases) {
    const found = resolveTsxFrom(base);
    if (found) return found;
  }
  throw new CollectiveError(
    `launch: typescript: true registers tsx in every rank, but the package 'tsx' cannot be resolved from ${entry}, from ${process.cwd()} or from @ulysses/collectives; install it (npm i -D tsx) or use a plain .js/.mjs entry without the typescript option`,
  );
}

function isSourceCondition(argv: readonly string[], i: number): number {
  const a = argv[i]!;
  if (a === `--conditions=${SOURCE_CONDITION}` || a === `-C=${SOURCE_CONDITION}`) return 1;
  if ((a === "--conditions" || a === "-C") && argv[i + 1] === SOURCE_CONDITION) return 2;
  return 0;
}

/** From source: --conditions=@ulysses/source and --import tsx, plus the parent's own flags (without repeating those). */
function sourceExecArgv(): string[] {
  const own = [`--conditions=${SOURCE_CONDITION}`, "--import", "tsx"];
  const inherited: string[] = [];
  const argv = process.execArgv;
  for (let i = 0; i < argv.length; i++) {
    const condition = isSourceCondition(argv, i);
    if (condition) {
      i += condition - 1;
      continue;
    }
    if (argv[i] === "--import=tsx") continue;
    if (argv[i] === "--import" && argv[i + 1] === "tsx") {
      i++;
      continue;
    }
    inherited.push(argv[i]!);
  }
  return [...own, ...inherited];
}

/**
 * Compiled: undefined (Node's default: inherit the parent's flags, silently
 * leaving out those a worker cannot take), or the parent's flags less the
 * `@ulysses/source` condition when it has one.
 */
function compiledExecArgv(): string[] | undefined {
  const argv = process.execArgv;
  const kept: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const condition = isSourceCondition(argv, i);
    if (condition) i += condition - 1;
    else kept.push(argv[i]!);
  }
  return kept.length === argv.length ? undefined : kept;
}

interface WorkerPlan {
  source: string;
  execArgv: string[] | undefined;
}

/** How the workers start; throws a CollectiveError up front for a TypeScript entry or backend that cannot load. */
function planWorkers(entry: string, backend: string, typescript: boolean | undefined): WorkerPlan {
  if (fromSource) return { source: bootstrap(resolveFromHere("tsx/esm/api")), execArgv: sourceExecArgv() };
  if (!typescript) {
    if (TS_FILE.test(new URL(entry).pathname)) {
      throw new CollectiveError(
        `launch: entry ${entry} is TypeScript, and the compiled @ulysses/collectives runs ranks with plain node; pass typescript: true (needs the 'tsx' package) or use a .js/.mjs entry`,
      );
    }
    if (TS_FILE.test(backend)) {
      throw new CollectiveError(
        `launch: backend module '${backend}' is TypeScript, and the compiled @ulysses/collectives runs ranks with plain node; pass typescript: true (needs the 'tsx' package) or use a .js/.mjs module`,
      );
    }
    return { source: bootstrap(null), execArgv: compiledExecArgv() };
  }
  return { source: bootstrap(resolveCallerTsx(entry)), execArgv: compiledExecArgv() };
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T | "timeout"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<"timeout">((done) => (timer = setTimeout(() => done("timeout"), ms)));
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const describe = (e: unknown) => (e instanceof Error ? `${e.name}: ${e.message}` : String(e));

/** Starts the ranks and runs every rank's setup; see LaunchedWorld. */
export async function launch<Api extends object, Args = unknown>(options: LaunchOptions<Args>): Promise<LaunchedWorld<Api>> {
  const { worldSize, backend = "threads", timeoutMs = DEFAULT_TIMEOUT_MS, shutdownTimeoutMs = 30_000 } = options;
  if (!Number.isInteger(worldSize) || worldSize < 1) throw new CollectiveError(`launch: worldSize ${worldSize} must be a positive integer`);
  const ortThreads = options.ortThreadsPerRank ?? Math.max(1, Math.floor(availableParallelism() / worldSize));
  const maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const entry =
    options.entry instanceof URL ? options.entry.href : options.entry.startsWith("file:") ? options.entry : pathToFileURL(resolve(options.entry)).href;
  const plan = planWorkers(entry, backend, options.typescript);
  const world = WorldControl.create(worldSize);
  const ranks = Array.from({ length: worldSize }, (_, r) => r);
  const worldResources = { worldSize, control: world.sab, group: createGroupResources("world", ranks, maxMessageBytes), maxMessageBytes };

  const groups = new Map<string, GroupResources>();
  const coordinator: Coordinator = {
    joinGroup(key, worldRanks) {
      if (!groups.has(key)) groups.set(key, createGroupResources(key, worldRanks, maxMessageBytes));
      return groups.get(key)!;
    },
  };

  let stopping = false;
  const exitCodes: (number | null)[] = ranks.map(() => null);
  const ports: MessagePort[] = [];
  const exited: Promise<number>[] = [];
  const gone: Promise<never>[] = [];
  const workers = ranks.map((rank) => {
    const channel = new MessageChannel();
    ports.push(channel.port1);
    Comlink.expose(coordinator, nodeEndpoint(channel.port1));
    const data: WorkerStartData & { coordinator: MessagePort } = {
      rank,
      worldSize,
      entry,
      args: options.args,
      backend,
      timeoutMs,
      ortThreads,
      world: worldResources,
      backendOptions: options.backendOptions ?? {},
      coordinator: channel.port2,
    };
    const worker = new Worker(plan.source, {
      eval: true,
      workerData: data,
      transferList: [channel.port2],
      execArgv: plan.execArgv,
      env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" },
    });
    let markGone: (e: Error) => void = () => undefined;
    gone.push(new Promise<never>((_, reject) => (markGone = reject)));
    gone[rank]!.catch(() => undefined);
    exited.push(
      new Promise<number>((done) => {
        worker.on("error", (e) => {
          const reason = `rank ${rank} failed: ${describe(e)}`;
          world.abort(rank, reason);
          markGone(new CollectiveError(reason, { cause: e }));
        });
        worker.on("exit", (code) => {
          exitCodes[rank] = code;
          if (!stopping) world.abort(rank, `rank ${rank} exited with code ${code}`);
          markGone(new CollectiveError(`rank ${rank} exited with code ${code}`));
          done(code);
        });
      }),
    );
    return worker;
  });
  const controls = workers.map((w) => Comlink.wrap<WorkerControl>(nodeEndpoint(w)));
  const race = <T>(r: number, p: Promise<T>) => Promise.race([p, gone[r]!]);

  const shutdown = async (how: ShutdownOptions = {}): Promise<number[]> => {
    stopping = true;
    const patience = how.timeoutMs ?? shutdownTimeoutMs;
    const terminate = new Set(how.terminate ?? []);
    await Promise.all(
      ranks.map(async (r) => {
        if (exitCodes[r] !== null) return;
        if (terminate.has(r)) {
          await workers[r]!.terminate();
          return;
        }
        await withTimeout(
          race(r, controls[r]!.stop()).catch(() => undefined),
          patience,
        );
        if ((await withTimeout(exited[r]!, patience)) === "timeout") await workers[r]!.terminate();
      }),
    );
    await Promise.all(exited);
    for (const port of ports) port.close();
    return exitCodes.map((c) => c ?? 0);
  };

  let apis: Remote<Api>[];
  try {
    const apiPorts = await Promise.all(ranks.map((r) => race(r, controls[r]!.start() as Promise<MessagePort>)));
    apis = apiPorts.map((port, r) => {
      const remote = Comlink.wrap<Api>(nodeEndpoint(port)) as unknown as Record<string | symbol, (...a: unknown[]) => Promise<unknown>>;
      ports.push(port);
      return new Proxy({} as Remote<Api>, {
        get: (_, name) => (name === "then" ? undefined : (...args: unknown[]) => race(r, remote[name]!(...args))),
      });
    });
  } catch (e) {
    const failure = world.failure();
    await shutdown();
    throw new CollectiveError(`launch of ${entry} with ${worldSize} ranks failed: ${failure?.reason ?? describe(e)}`, { cause: e });
  }

  return {
    worldSize,
    async all(method, ...args) {
      const settled = await Promise.allSettled(
        ranks.map((r) => (apis[r] as unknown as Record<PropertyKey, (...a: unknown[]) => Promise<unknown>>)[method as PropertyKey]!(...args)),
      );
      const rejected = settled.flatMap((s, r) => (s.status === "rejected" ? [{ r, reason: s.reason as unknown }] : []));
      if (rejected.length === 0) return settled.map((s) => (s as PromiseFulfilledResult<unknown>).value) as never;
      const failure = world.failure();
      const root = rejected.find((x) => x.r === failure?.rank) ?? rejected[0]!;
      throw new CollectiveError(`${String(method)} failed: ${failure?.reason ?? `rank ${root.r}: ${describe(root.reason)}`}`, { cause: root.reason });
    },
    rank(r) {
      if (!Number.isInteger(r) || r < 0 || r >= worldSize) throw new CollectiveError(`rank ${r} is not in [0, ${worldSize})`);
      return apis[r]!;
    },
    async stats() {
      return (await Promise.all(ranks.map((r) => race(r, controls[r]!.statsOf() as Promise<CommStats>)))) as CommStats[];
    },
    failure: () => world.failure(),
    abort: (rank, reason) => world.abort(rank, reason),
    liveWorkers: () => exitCodes.filter((c) => c === null).length,
    shutdown,
  };
}
