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
import { parseArgs } from "node:util";
import { printTable, writeResults, type BenchRow } from "./collectives-measure.js";

const { values } = parseArgs({
  options: {
    ranks: { type: "string", default: "2,4" },
    sizes: { type: "string", default: "1,4,8,16,64" },
    reduction: { type: "string", default: "ordered" },
  },
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
for (const np of values.ranks!.split(",").map(Number).filter((n) => n > 0)) {
  // the flags of the package's mpirunCommand with typescript: true and nodeArgs: [SOURCE_CONDITION_ARG]
  // (the rank entry is TypeScript run from the workspace sources; kept inline: tools/bench does not depend on the package by name)
  const args = ["--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-x", "ORT_DISABLE_TELEMETRY=1", "-np", String(np), "node", "--conditions=@ulysses/source", "--import", "tsx", entry, values.sizes!, values.reduction!];
  const run = spawnSync("mpirun", args, { cwd: repoRoot, encoding: "utf8", env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" }, maxBuffer: 64 << 20 });
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
