/**
 * The rank side of `pnpm bench:collectives:mpi` (one process per rank, under
 * mpirun; collectives-mpi-bench.ts starts it). Every rank measures with the
 * shared collectives-measure.ts; rank 0 also times single-thread memcpys
 * (while the others wait in a barrier), gathers every rank's timings, and
 * prints the same table as `pnpm bench:collectives`, plus small-message
 * latencies. Rank 0 prints one `ULYSSES_BENCH {json}` line for the launcher.
 *
 *   mpirun ... -np P node --conditions=@ulysses/source --import tsx src/collectives-mpi-rank.ts SIZES_MIB REDUCTION
 */
import { fileURLToPath } from "node:url";
import { init, type ProcessGroup } from "@ulysses/collectives";
import { measureMemcpy, measureMemcpyHot, measureRank, summarize, type BenchConfig, type BenchRow, type RankTiming } from "./collectives-measure.js";

const sizesMiB = (process.argv[2] ?? "1,4,8,16,64")
  .split(",")
  .map(Number)
  .filter((n) => n > 0);
const reduction = process.argv[3] ?? "ordered";
// the backend module by its package subpath (its TypeScript source under the workspace's source condition)
const backendModule = fileURLToPath(import.meta.resolve("@ulysses/collectives-mpi/module"));
const world = await init({ backend: backendModule, timeoutMs: 300_000, reduction });

/** Mean microseconds per call of `call`, after warm-up; the slowest rank's value on every rank. */
async function latency(group: ProcessGroup, call: () => Promise<unknown>, iters = 300): Promise<number> {
  for (let i = 0; i < 20; i++) await call();
  await group.barrier();
  const start = performance.now();
  for (let i = 0; i < iters; i++) await call();
  const mine = Float64Array.from([((performance.now() - start) * 1000) / iters]);
  await group.allReduce(mine, { op: "max" });
  return mine[0]!;
}

let memcpy = new Map<number, number>();
let memcpyHot = new Map<number, number>();
if (world.rank === 0) {
  memcpy = measureMemcpy(sizesMiB);
  memcpyHot = measureMemcpyHot(sizesMiB);
}
await world.barrier();
const config: BenchConfig = { sizesMiB, ops: ["allToAll", "allReduce"] };
const timings = await measureRank(world, config);
// every rank's timings (JSON, whatever fields measureRank records) to every rank
const mine = new TextEncoder().encode(JSON.stringify(timings));
const lengths = Array.from((await world.allGather(Int32Array.from([mine.length]))).data as Int32Array);
const gathered = (await world.allGather(mine, { sizes: lengths })).data as Uint8Array;
let offset = 0;
const perRank: RankTiming[][] = lengths.map((n) => {
  const text = new TextDecoder().decode(gathered.subarray(offset, offset + n));
  offset += n;
  return JSON.parse(text) as RankTiming[];
});
const small = new Float32Array(256); // 1 KiB per rank
const tiny = new Float32Array(4);
const latencies = {
  barrierUs: await latency(world, () => world.barrier()),
  allToAll1KiBUs: await latency(world, () => world.allToAll(small)),
  allReduce16BUs: await latency(world, () => world.allReduce(tiny)),
};
if (world.rank === 0) {
  const rows: BenchRow[] = summarize(`mpi (${reduction})`, perRank, memcpy, sizesMiB, memcpyHot);
  console.log(`ULYSSES_BENCH ${JSON.stringify({ ranks: world.size, reduction, rows, latencies })}`);
}
await world.destroy();
