/**
 * Builds the mpirun command line that starts a TypeScript entry on N ranks
 * with this workspace's settings: --allow-run-as-root (CI runs as root),
 * --oversubscribe (more ranks than cores), --bind-to none (bound ranks on a
 * 2-core machine share one core), ORT_DISABLE_TELEMETRY=1 exported to every
 * rank, and node with the "@ulysses/source" condition and tsx. Tests, the
 * benchmark and scripts/mpi use it; it starts nothing itself.
 */
export interface MpirunOptions {
  /** Number of ranks. */
  np: number;
  /** The .ts (or .js) file every rank runs. */
  entry: string;
  /** Arguments after the entry. */
  args?: readonly string[];
  /** More environment variables for the ranks: NAME (taken from mpirun's environment) or NAME=VALUE. */
  exportEnv?: readonly string[];
  /** More mpirun flags, placed before the program (e.g. --host, --mca ...). */
  mpirunArgs?: readonly string[];
  /** The node binary on the ranks' hosts (default "node"). */
  node?: string;
}

/** [command, ...args] for child_process.spawn. */
export function mpirunCommand(options: MpirunOptions): [string, ...string[]] {
  const exported = ["ORT_DISABLE_TELEMETRY=1", ...(options.exportEnv ?? [])].flatMap((name) => ["-x", name]);
  return [
    "mpirun",
    "--allow-run-as-root",
    "--oversubscribe",
    "--bind-to",
    "none",
    ...exported,
    ...(options.mpirunArgs ?? []),
    "-np",
    String(options.np),
    options.node ?? "node",
    "--conditions=@ulysses/source",
    "--import",
    "tsx",
    options.entry,
    ...(options.args ?? []),
  ];
}
