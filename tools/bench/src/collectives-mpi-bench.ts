/**
 * `pnpm bench:collectives:mpi`: the collectives benchmark on the mpi backend.
 * For each P it starts collectives-mpi-rank.ts under mpirun (one process per
 * rank; mpirunCommand's flags), collects rank 0's rows, and prints the same
 * table as `pnpm bench:collectives` (shared printing in
 * collectives-measure.ts), small-message latencies, and DESIGN.md's earlier
 * figure for comparison; writes bench-results/collectives-mpi.json. Never
 * part of `test`. Needs OpenMPI and the built addon.
 *
 *   node --conditions=@ulysses/source --import tsx src/collectives-mpi-bench.ts [--ranks 2,4] [--sizes 1,4,8,16,64] [--reduction ordered|mpi]
 */
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { mpirunCommand, REDUCTION_MODES, SOURCE_CONDITION_ARG } from "@ulysses/collectives-mpi";
import { parseFlags, positiveIntegers, positiveNumbers, readCommandLine, UsageError } from "./cli-flags.js";
import { printTable, writeResults, type BenchRow } from "./collectives-measure.js";

const HELP = `Usage: pnpm bench:collectives:mpi [flags]

The collectives benchmark on the mpi backend (one process per rank under
mpirun; needs OpenMPI and the built addon); writes bench-results/collectives-mpi.json.

  --ranks LIST        world sizes (default 2,4)
  --sizes LIST        MiB per rank (default 1,4,8,16,64)
  --reduction MODE    ${REDUCTION_MODES.join(" | ")} (default ordered)
  --help, -h          this text
`;

const values = readCommandLine(HELP, process.argv.slice(2), (argv) => {
  const parsed = parseFlags("bench:collectives:mpi", argv, {
    ranks: { type: "string", default: "2,4" },
    sizes: { type: "string", default: "1,4,8,16,64" },
    reduction: { type: "string", default: "ordered" },
  });
  if (parsed === null) return null;
  if (!(REDUCTION_MODES as readonly string[]).includes(parsed.reduction))
    throw new UsageError(`bench:collectives:mpi: --reduction must be one of ${REDUCTION_MODES.join(", ")}, got '${parsed.reduction}'`);
  positiveNumbers("--sizes", parsed.sizes); // checked here; the ranks read the list themselves
  return { ranks: positiveIntegers("--ranks", parsed.ranks), sizes: parsed.sizes, reduction: parsed.reduction };
});
const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));
const entry = fileURLToPath(new URL("./collectives-mpi-rank.ts", import.meta.url));

interface RankZeroReport {
  ranks: number;
  reduction: string;
  rows: BenchRow[];
  latencies: Record<string, number>;
}

const reports: RankZeroReport[] = [];
for (const np of values.ranks) {
  // the rank entry is TypeScript run from the workspace sources
  const [command, ...args] = mpirunCommand({ np, entry, args: [values.sizes, values.reduction], typescript: true, nodeArgs: [SOURCE_CONDITION_ARG] });
  const run = spawnSync(command, args, { cwd: repoRoot, encoding: "utf8", env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" }, maxBuffer: 64 << 20 });
  const line = run.stdout?.split("\n").find((l) => l.startsWith("ULYSSES_BENCH "));
  if (run.status !== 0 || !line) {
    console.error(run.stdout, run.stderr, run.error ?? "");
    throw new Error(`mpirun -np ${np} ${entry} exited ${run.status}${run.error ? ` (${run.error.message})` : ""}`);
  }
  reports.push(JSON.parse(line.slice("ULYSSES_BENCH ".length)) as RankZeroReport);
}

printTable(reports.flatMap((r) => r.rows));
console.log("\nsmall-message latency (slowest rank, mean of 300 calls):");
for (const r of reports) {
  const text = Object.entries(r.latencies).map(([name, us]) => `${name.replace(/Us$/, "")} ${us.toFixed(0)} us`);
  console.log(`  P=${r.ranks}: ${text.join(", ")}`);
}
const target = reports.flatMap((r) => r.rows).find((row) => row.ranks === 2 && row.op === "allToAll" && row.mib === 8);
if (target) console.log(`all-to-all at P=2, 8 MiB: ${target.perRankGBps.toFixed(2)} GB/s per rank (DESIGN.md's earlier measurement: 9.5 GB/s per rank)`);
const file = writeResults("collectives-mpi.json", { date: new Date().toISOString(), backend: "mpi", reduction: values.reduction, reports });
console.log(`wrote ${file}`);
