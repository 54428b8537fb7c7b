/**
 * The "mpi" backend factory. Each process started by mpirun calls it (through
 * `init({ backend: "mpi" })` of @ulysses/collectives, or directly) and gets
 * the world group; calling it again in the same process returns the same
 * group until it is destroyed. Options: `timeoutMs` (default 10 000; 0
 * disables) and `reduction` ("ordered", the default, or "mpi"; see
 * reductions.ts).
 */
import type { BackendFactory, BackendInitOptions, ProcessGroup } from "@ulysses/collectives";
import { MpiError } from "./errors.js";
import { startMpi } from "./lifecycle.js";
import { MpiGroup } from "./mpi-group.js";
import { REDUCTION_MODES, type ReductionMode } from "./reductions.js";

export interface MpiInitOptions extends BackendInitOptions {
  /** How allReduce and reduceScatter reduce: "ordered" (bitwise equal to the other backends) or "mpi" (MPI's own reductions). */
  reduction?: ReductionMode;
}

let world: Promise<MpiGroup> | null = null;

function optionsOf(options: MpiInitOptions): { timeoutMs: number; reduction: ReductionMode } {
  const timeoutMs = options.timeoutMs ?? 10_000;
  if (typeof timeoutMs !== "number" || !(timeoutMs >= 0)) throw new MpiError(`timeoutMs must be a number >= 0 (0 disables), got ${String(timeoutMs)}`);
  const reduction = options.reduction ?? "ordered";
  if (!REDUCTION_MODES.includes(reduction)) throw new MpiError(`reduction must be one of ${REDUCTION_MODES.join(", ")}, got ${String(reduction)}`);
  return { timeoutMs, reduction };
}

async function createWorld(options: MpiInitOptions): Promise<MpiGroup> {
  const { timeoutMs, reduction } = optionsOf(options);
  const mpi = startMpi();
  const lane = mpi.native.createLane();
  const control = await mpi.native.commDup(lane, 0);
  const worldRanks = Array.from({ length: mpi.size }, (_, r) => r);
  return new MpiGroup({ native: mpi.native, comm: 0, control, lane, worldRanks, timeoutMs, reduction, isWorld: true });
}

/** This process's world group (all ranks of the mpirun job). */
export const mpiBackend: BackendFactory = (options: MpiInitOptions = {}): Promise<ProcessGroup> => {
  if (world) {
    return world.then((group) => {
      if (group.isDestroyed) throw new MpiError("the mpi world group was destroyed (MPI is finalized); a process can initialise MPI only once");
      return group;
    });
  }
  world = createWorld(options);
  world.catch(() => (world = null));
  return world;
};
