/**
 * Picks how the ranks start for a backend: `threads` (worker threads of this
 * process, the default), `local` (every rank in this thread on the reference
 * backend; tests and debugging), `mpi` or a module path (this process is one
 * rank, started by mpirun or the user's launcher, and runs the same SPMD
 * code as every other rank; world rank 0 writes the files).
 */
import { init, listBackends, localRanksOnHost } from "@ulysses/collectives";
import type { TrainConfig } from "./config.js";
import type { RunPlan } from "./plan.js";
import { TrainerError } from "./errors.js";
import { InProcessPool, collectiveTimeoutMs, type RankPool } from "./rank-pool.js";
import { RankTrainer } from "./rank-trainer.js";
import { ThreadsPool } from "./threads-pool.js";

/** Registers the MPI backend by importing its package (it is optional: the addon needs OpenMPI). */
async function loadMpiBackend(): Promise<void> {
  if (listBackends().includes("mpi")) return;
  const name = "@ulysses/collectives-mpi";
  try {
    await import(name);
  } catch (cause) {
    throw new TrainerError(`--backend mpi needs the package ${name} (built against OpenMPI) importable from the trainer: ${(cause as Error).message}`, {
      cause,
    });
  }
}

/** This process as one rank of a world started outside (mpirun, or a user backend). */
async function processRank(config: TrainConfig, resumeFile: string | null, plan: RunPlan): Promise<RankPool> {
  if (config.backend === "mpi") await loadMpiBackend();
  const world = await init({ backend: config.backend, timeoutMs: collectiveTimeoutMs(config) });
  // Ranks that mpirun placed on this host share its cores.
  const ranksInProcess = localRanksOnHost(process.env);
  const trainer = await RankTrainer.create({ world, config, plan, ranksInProcess, resumeFile }).catch((cause: unknown) => {
    throw new TrainerError(`rank ${world.rank} failed to start: ${(cause as Error).message}`, { cause });
  });
  return new InProcessPool([trainer], world.size, world.rank);
}

export async function startPool(config: TrainConfig, resumeFile: string | null, plan: RunPlan): Promise<RankPool> {
  switch (config.backend) {
    case "threads":
      return ThreadsPool.start(config, resumeFile, plan);
    case "local":
      return InProcessPool.local(config, resumeFile, plan);
    default:
      return processRank(config, resumeFile, plan);
  }
}
