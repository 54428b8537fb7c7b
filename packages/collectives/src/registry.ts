/**
 * The backend registry: names to factories, and `init`, which makes this
 * process's (or worker's) world group from a registered name or from a module
 * path whose default export (or `createBackend` export) is a BackendFactory.
 * Built in: "threads". The "local" backend (all ranks in one thread) does not
 * fit a one-group-per-process factory; use `createLocalGroups` directly.
 */
import { isAbsolute, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { CollectiveError } from "./errors.js";
import { createThreadsGroup } from "./threads/context.js";
import type { BackendFactory, BackendInitOptions, ProcessGroup } from "./types.js";

const factories = new Map<string, BackendFactory>();

/** Registers `factory` under `name`; a second registration of a name throws. */
export function registerBackend(name: string, factory: BackendFactory): void {
  if (typeof name !== "string" || name.length === 0) throw new CollectiveError(`registerBackend: name must be a non-empty string, got ${String(name)}`);
  if (typeof factory !== "function") throw new CollectiveError(`registerBackend('${name}'): factory must be a function, got ${typeof factory}`);
  if (factories.has(name)) throw new CollectiveError(`registerBackend: a backend named '${name}' is already registered`);
  factories.set(name, factory);
}

/** The factory registered under `name`, or undefined. */
export function getBackend(name: string): BackendFactory | undefined {
  return factories.get(name);
}

export function listBackends(): string[] {
  return [...factories.keys()];
}

function looksLikeModule(name: string): boolean {
  return name.startsWith("file:") || name.startsWith(".") || isAbsolute(name) || /\.(m?[jt]s|cjs)$/.test(name);
}

async function loadModuleBackend(name: string): Promise<BackendFactory> {
  const url = name.startsWith("file:") ? name : pathToFileURL(resolve(name)).href;
  let module: { default?: unknown; createBackend?: unknown };
  try {
    module = (await import(url)) as typeof module;
  } catch (e) {
    throw new CollectiveError(`backend module '${name}' could not be loaded: ${(e as Error).message}`, { cause: e });
  }
  const factory = typeof module.default === "function" ? module.default : module.createBackend;
  if (typeof factory !== "function") throw new CollectiveError(`backend module '${name}' exports neither a default function nor createBackend`);
  if (!factories.has(name)) registerBackend(name, factory as BackendFactory);
  return factories.get(name)!;
}

/**
 * The factory a backend name or module path stands for, without starting it:
 * a registered name, or a module path imported (and registered) now. Throws a
 * CollectiveError naming it when it is neither, or the module fails to load
 * or exports no factory. `init` calls it; a launcher may call it first to
 * refuse a bad module before it writes or starts anything.
 */
export async function loadBackend(backend: string): Promise<BackendFactory> {
  const factory = factories.get(backend);
  if (factory) return factory;
  if (!looksLikeModule(backend)) throw new CollectiveError(`unknown backend '${backend}'; registered: ${listBackends().join(", ")} (or pass a module path)`);
  return loadModuleBackend(backend);
}

export interface InitOptions extends BackendInitOptions {
  /** A registered backend name or a module path (default "threads"). */
  backend?: string;
}

/** Creates this rank's world group with the chosen backend. */
export async function init(options: InitOptions = {}): Promise<ProcessGroup> {
  const { backend = "threads", ...rest } = options;
  const factory = await loadBackend(backend);
  try {
    return await factory(rest);
  } catch (e) {
    if (e instanceof CollectiveError) throw e;
    throw new CollectiveError(`backend '${backend}' failed to start: ${(e as Error).message}`, { cause: e });
  }
}

registerBackend("threads", createThreadsGroup);
