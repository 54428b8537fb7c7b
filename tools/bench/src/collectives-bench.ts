/**
 * `pnpm bench:collectives`: all-to-all and all-reduce bandwidth per rank for
 * P = 2 and 4 and sizes 1-64 MiB, next to a single-thread memcpy of the same
 * bytes measured in the same run; prints a table and writes
 * bench-results/collectives.json. Never part of `test`.
 *
 *   node --conditions=@ulysses/source --import tsx src/collectives-bench.ts [--backend threads] [--ranks 2,4] [--sizes 1,8,64]
 *
 * `--backend` names the backend each launched rank initialises (a registered
 * name or a module path). Backends whose ranks are separate processes (MPI)
 * reuse collectives-measure.ts from their own entry instead.
 */
import { fileURLToPath } from "node:url";
import { launch } from "@ulysses/collectives";
import { parseFlags, positiveIntegers, positiveNumbers, readCommandLine } from "./cli-flags.js";
import {
  measureMemcpy,
  measureMemcpyHot,
  printTable,
  summarize,
  writeResults,
  type BenchConfig,
  type BenchRow,
  type RankTiming,
} from "./collectives-measure.js";

const HELP = `Usage: pnpm bench:collectives [flags]

All-to-all and all-reduce bandwidth per rank next to a single-thread memcpy of
the same bytes; writes bench-results/collectives.json.

  --backend NAME   the backend each rank initialises: a registered name or a module path (default threads)
  --ranks LIST     world sizes (default 2,4)
  --sizes LIST     MiB per rank (default 1,4,8,16,64)
  --help, -h       this text
`;

const values = readCommandLine(HELP, process.argv.slice(2), (argv) => {
  const parsed = parseFlags("bench:collectives", argv, {
    backend: { type: "string", default: "threads" },
    ranks: { type: "string", default: "2,4" },
    sizes: { type: "string", default: "1,4,8,16,64" },
  });
  return parsed === null
    ? null
    : { backend: parsed.backend, ranks: positiveIntegers("--ranks", parsed.ranks), sizesMiB: positiveNumbers("--sizes", parsed.sizes) };
});
const { sizesMiB } = values;
const config: BenchConfig = { sizesMiB, ops: ["allToAll", "allReduce"] };
const entry = fileURLToPath(new URL("./collectives-rank.ts", import.meta.url));

const rows: BenchRow[] = [];
for (const worldSize of values.ranks) {
  const world = await launch<{ measure(c: BenchConfig): Promise<RankTiming[]> }>({ worldSize, entry, backend: values.backend, timeoutMs: 120_000 });
  try {
    const perRank = await world.all("measure", config);
    // memcpy measured right after, in the same process, while the ranks idle
    rows.push(...summarize(values.backend, perRank, measureMemcpy(sizesMiB), sizesMiB, measureMemcpyHot(sizesMiB)));
  } finally {
    await world.shutdown();
  }
}
printTable(rows);
const target = rows.find((r) => r.ranks === 2 && r.op === "allToAll" && r.mib === 8);
if (target) {
  console.log(
    `target: all-to-all at P=2, 8 MiB reaches ${(target.perRankRatio * 100).toFixed(0)}% (per rank) / ${(target.aggregateRatio * 100).toFixed(0)}% (aggregate) of out-of-cache memcpy; goal >= 70%`,
  );
}
const file = writeResults("collectives.json", { date: new Date().toISOString(), backend: values.backend, sizesMiB, rows });
console.log(`wrote ${file}`);
