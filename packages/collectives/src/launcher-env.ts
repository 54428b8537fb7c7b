/**
 * What a launcher (mpirun, or another PMI launcher) tells a process it
 * started, through its environment: the world size, this process's rank, and
 * the ranks it placed on this host. null (or 1) when no launcher started it.
 */

/** World size the launcher reports, when the process was started by mpirun (or another PMI launcher). */
export function launcherWorldSize(env: NodeJS.ProcessEnv = process.env): number | null {
  const value = env.OMPI_COMM_WORLD_SIZE ?? env.PMI_SIZE ?? env.PMIX_SIZE;
  return value === undefined ? null : Number(value);
}

/** This process's world rank when a launcher (mpirun) started it, else null. */
export function launcherRank(env: NodeJS.ProcessEnv = process.env): number | null {
  const value = env.OMPI_COMM_WORLD_RANK ?? env.PMI_RANK ?? env.PMIX_RANK;
  return value === undefined ? null : Number(value);
}

/** Ranks sharing this host's cores, from the launcher's environment (1 when unknown). */
export function localRanksOnHost(env: NodeJS.ProcessEnv = process.env): number {
  const value = Number(env.OMPI_COMM_WORLD_LOCAL_SIZE ?? env.MPI_LOCALNRANKS ?? env.PMI_LOCAL_SIZE ?? 1);
  return Number.isInteger(value) && value > 0 ? value : 1;
}
