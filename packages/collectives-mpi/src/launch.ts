/**
 * Builds the mpirun command line that starts an entry on N ranks with this
 * workspace's settings: --allow-run-as-root (CI runs as root),
 * --oversubscribe (more ranks than cores), --bind-to none (bound ranks on a
 * 2-core machine share one core), ORT_DISABLE_TELEMETRY=1 exported to every
 * rank, and `node [nodeArgs] [--import tsx] entry args`. By default the ranks
 * run plain node, which is what an installed (compiled) package needs for a
 * .js/.mjs entry; `typescript: true` adds `--import tsx` (tsx resolved by node
 * from the ranks' cwd) for a TypeScript entry. Inside this monorepo, where the
 * packages run from their TypeScript sources, the tests pass `typescript: true,
 * nodeArgs: [SOURCE_CONDITION_ARG]`. It starts nothing itself.
 */
export interface MpirunOptions {
  /** Number of ranks. */
  np: number;
  /** The file every rank runs (.js/.mjs; .ts with `typescript: true`). */
  entry: string;
  /** Arguments after the entry. */
  args?: readonly string[];
  /** More environment variables for the ranks: NAME (taken from mpirun's environment) or NAME=VALUE. */
  exportEnv?: readonly string[];
  /** More mpirun flags, placed before the program (e.g. --host, --mca ...). */
  mpirunArgs?: readonly string[];
  /** The node binary on the ranks' hosts (default "node"). */
  node?: string;
  /** Node flags placed before the entry (e.g. [SOURCE_CONDITION_ARG], "--expose-gc"). */
  nodeArgs?: readonly string[];
  /** Adds `--import tsx` so the entry may be TypeScript (needs the optional peer dependency tsx where the ranks run). Default false. */
  typescript?: boolean;
}

/** The node flag that makes the workspace packages resolve to their TypeScript sources (monorepo only; pair it with `typescript: true`). */
export const SOURCE_CONDITION_ARG = "--conditions=@ulysses/source";

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
    ...(options.nodeArgs ?? []),
    ...(options.typescript ? ["--import", "tsx"] : []),
    options.entry,
    ...(options.args ?? []),
  ];
}
