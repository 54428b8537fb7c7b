/**
 * Loads the native addon (build/Release/ulysses_mpi.node) and types its API.
 * When it is missing, the error says how to install MPI and build it; nothing
 * here decides policy (validation, lifetimes and failure handling live in
 * lifecycle.ts and mpi-group.ts).
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { constants } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { MpiError } from "./errors.js";

/** The addon's functions. Buffers are TypedArrays (ordinary or on a SharedArrayBuffer); counts are bytes unless said. */
export interface NativeMpi {
  init(): { rank: number; size: number; threadLevel: string; threadMultiple: boolean; processor: string; library: string };
  finalize(): void;
  abort(code: number, message: string): void;
  state(): { initialized: boolean; finalized: boolean; pendingJobs: number };
  createLane(): number;
  destroyLane(lane: number): void;
  /** The lane's running and queued jobs (given up on after a timeout) stop keeping the process alive; they still count in pendingJobs. */
  abandonLane(lane: number): void;
  commInfo(comm: number): { rank: number; size: number };
  /** color < 0: not a member (resolves -1). */
  commSplit(lane: number, comm: number, color: number, key: number): Promise<number>;
  commDup(lane: number, comm: number): Promise<number>;
  commFree(lane: number, comm: number): Promise<void>;
  alltoall(lane: number, comm: number, send: ArrayBufferView, recv: ArrayBufferView, bytesPerRank: number): Promise<void>;
  alltoallv(
    lane: number,
    comm: number,
    send: ArrayBufferView,
    sendCounts: number[],
    sendDispls: number[],
    recv: ArrayBufferView,
    recvCounts: number[],
    recvDispls: number[],
  ): Promise<void>;
  allgather(lane: number, comm: number, send: ArrayBufferView, recv: ArrayBufferView): Promise<void>;
  allgatherv(lane: number, comm: number, send: ArrayBufferView, recv: ArrayBufferView, recvCounts: number[], displs: number[]): Promise<void>;
  /** recvCounts in elements; divisor > 1 divides the result (mean). */
  reduceScatter(
    lane: number,
    comm: number,
    send: ArrayBufferView,
    recv: ArrayBufferView,
    recvCounts: number[],
    dtype: string,
    op: "sum" | "max",
    divisor: number,
  ): Promise<void>;
  /** recv === send: MPI_IN_PLACE; recv null: into the lane's scratch, then copied back into send. */
  allreduce(lane: number, comm: number, send: ArrayBufferView, recv: ArrayBufferView | null, dtype: string, op: "sum" | "max", divisor: number): Promise<void>;
  bcast(lane: number, comm: number, buffer: ArrayBufferView, root: number): Promise<void>;
  barrier(lane: number, comm: number): Promise<void>;
  send(lane: number, comm: number, buffer: ArrayBufferView, peer: number, tag: number): Promise<void>;
  /** Resolves with the number of bytes received. */
  recv(lane: number, comm: number, buffer: ArrayBufferView, peer: number, tag: number): Promise<number>;
}

const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const ADDON_PATH = join(packageDir, "build", "Release", "ulysses_mpi.node");
export const INSTALL_HINT =
  "install OpenMPI (Debian/Ubuntu: apt-get install -y openmpi-bin libopenmpi-dev), then build the addon with `pnpm --filter @ulysses/collectives-mpi build:addon` (pnpm install also builds it when mpicc is on PATH)";

let loaded: NativeMpi | null = null;

function hasCommand(command: string, args: string[]): boolean {
  const probe = spawnSync(command, args, { stdio: "ignore" });
  return !probe.error && probe.status === 0;
}

/** True when the addon has been built (it may still fail to load). */
export function addonBuilt(): boolean {
  return existsSync(ADDON_PATH);
}

/** True when `mpirun` is on PATH. */
export function mpirunAvailable(): boolean {
  return hasCommand("mpirun", ["--version"]);
}

/**
 * The addon, loaded once (`path` is for tests). libmpi is loaded with RTLD_GLOBAL so that OpenMPI's
 * own plugins (dlopen'ed MCA components) can resolve its symbols.
 */
export function loadAddon(path = ADDON_PATH): NativeMpi {
  if (loaded && path === ADDON_PATH) return loaded;
  if (!existsSync(path)) {
    const why = hasCommand("mpicc", ["--showme:version"]) ? "MPI is installed but the addon was not built" : "MPI is not installed (no mpicc on PATH)";
    throw new MpiError(`the mpi backend is unavailable: ${why}; ${path} is missing. To use it, ${INSTALL_HINT}`);
  }
  const module = { exports: {} as NativeMpi };
  try {
    process.dlopen(module, path, constants.dlopen.RTLD_NOW | constants.dlopen.RTLD_GLOBAL);
  } catch (cause) {
    throw new MpiError(`cannot load ${path} (${(cause as Error).message}); rebuild it: ${INSTALL_HINT}`, { cause });
  }
  if (path === ADDON_PATH) loaded = module.exports;
  return module.exports;
}
