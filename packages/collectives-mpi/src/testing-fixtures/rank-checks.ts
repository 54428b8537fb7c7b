/**
 * Runs on every rank under mpirun (see ../mpi-backend.test.ts): exercises the
 * mpi backend against expected values written out from the definitions (not
 * computed by the backend), then prints one `ULYSSES_CHECKS {json}` line per
 * rank, then runs the shared conformance suite (@ulysses/collectives/testing)
 * and prints one `ULYSSES_CONFORMANCE {json}` line per rank and check.
 * Arguments: the reduction mode ("ordered" or "mpi"), then optionally a
 * folder: each rank then writes its lines to NAME-RANK.jsonl there instead.
 */
import { CollectiveError, init, type ProcessGroup } from "@ulysses/collectives";
import { runConformance } from "@ulysses/collectives/testing";
import { Tensor } from "@ulysses/tensors";
import { appendFileSync } from "node:fs";
import { join } from "node:path";
import { MpiGroup, type ReductionMode } from "../index.js";

const reduction = (process.argv[2] ?? "ordered") as ReductionMode;
const reportDir = process.argv[3];
// importing ../index.js registered backend "mpi"
const world = await init({ backend: "mpi", timeoutMs: 60_000, reduction });
if (!(world instanceof MpiGroup)) throw new Error(`init({ backend: "mpi" }) returned ${world.backend}`);
const P = world.size;
const r = world.rank;
const failures: string[] = [];
let passed = 0;

function expectEqual(what: string, actual: unknown, expected: unknown): void {
  const a = JSON.stringify(actual, (_, v) => (typeof v === "bigint" ? `${v}n` : v));
  const e = JSON.stringify(expected, (_, v) => (typeof v === "bigint" ? `${v}n` : v));
  if (a !== e) throw new Error(`${what}: got ${a.slice(0, 300)}, expected ${e.slice(0, 300)}`);
}

/** The elements of a numeric (not int64) tensor as plain numbers. */
const numbers = (t: Tensor) => Array.from(t.data as ArrayLike<number>);

async function check(name: string, body: () => Promise<void>): Promise<void> {
  try {
    await body();
    passed++;
  } catch (error) {
    failures.push(`${name}: ${(error as Error).message}`);
  }
}

/** Value of rank `src`'s row `i`, column `c`: distinct everywhere. */
const value = (src: number, i: number, c: number) => src * 1000 + i * 10 + c;
function rows(src: number, count: number, cols: number, shared = false): Tensor<"float32"> {
  const t = Tensor.zeros("float32", [count, cols], { shared });
  for (let i = 0; i < count; i++) for (let c = 0; c < cols; c++) t.data[i * cols + c] = value(src, i, c);
  return t;
}

await check("allToAll even splits (SharedArrayBuffer input)", async () => {
  const out = await world.allToAll(rows(r, 2 * P, 3, true));
  const expected: number[] = [];
  for (let src = 0; src < P; src++) for (let i = 2 * r; i < 2 * r + 2; i++) for (let c = 0; c < 3; c++) expected.push(value(src, i, c));
  expectEqual("shape", out.shape, [2 * P, 3]);
  expectEqual("data", numbers(out), expected);
  expectEqual("stats", world.stats().byOp.allToAll.bytesSent, 2 * 3 * 4 * (P - 1));
});

await check("allToAll uneven splits into a caller output", async () => {
  // rank src sends (src + dst) % 3 rows to dst (zero-size blocks included)
  const split = (src: number, dst: number) => (src + dst) % 3;
  const inputSplits = Array.from({ length: P }, (_, j) => split(r, j));
  const outputSplits = Array.from({ length: P }, (_, j) => split(j, r));
  const output = Tensor.zeros("float32", [outputSplits.reduce((a, b) => a + b, 0), 2]);
  const input = rows(
    r,
    inputSplits.reduce((a, b) => a + b, 0),
    2,
  );
  const out = await world.allToAll(input, { inputSplits, outputSplits, output });
  const expected: number[] = [];
  for (let src = 0; src < P; src++) {
    let start = 0;
    for (let j = 0; j < r; j++) start += split(src, j);
    for (let i = start; i < start + split(src, r); i++) expected.push(value(src, i, 0), value(src, i, 1));
  }
  expectEqual("same tensor", out === output, true);
  expectEqual("data", numbers(out), expected);
});

await check("allGather with uneven sizes", async () => {
  const sizes = Array.from({ length: P }, (_, j) => j + 1);
  const out = await world.allGather(rows(r, r + 1, 2), { sizes });
  const expected: number[] = [];
  for (let src = 0; src < P; src++) for (let i = 0; i <= src; i++) expected.push(value(src, i, 0), value(src, i, 1));
  expectEqual("data", numbers(out), expected);
});

await check("allReduce sum/max/mean over float32, int32, int64, float16", async () => {
  const f = Float32Array.from({ length: 5 }, (_, i) => r * 10 + i);
  await world.allReduce(f);
  const sumRanks = (P * (P - 1)) / 2;
  expectEqual(
    "float32 sum",
    Array.from(f),
    Array.from({ length: 5 }, (_, i) => 10 * sumRanks + P * i),
  );
  const m = Int32Array.from({ length: 7 }, (_, i) => (i === r ? 100 + r : -i));
  await world.allReduce(m, { op: "max" });
  expectEqual(
    "int32 max",
    Array.from(m),
    Array.from({ length: 7 }, (_, i) => (i < P ? 100 + i : -i)),
  );
  const mean = new Tensor("float64", [3], Float64Array.from([r, 2 * r, 4]));
  await world.allReduce(mean, { op: "mean" });
  expectEqual("float64 mean", numbers(mean), [(P - 1) / 2, P - 1, 4]);
  const big = BigInt64Array.from([BigInt(r) * 10n ** 12n, -1n]);
  await world.allReduce(big);
  expectEqual("int64 sum", Array.from(big), [BigInt(sumRanks) * 10n ** 12n, BigInt(-P)]);
  const half = Uint16Array.from([0x3c00, 0x4000]); // float16 1.0, 2.0
  await world.allReduce(half);
  // P * 1.0 and P * 2.0 in float16 (P = 2: 0x4000, 0x4400; P = 4: 0x4400, 0x4800)
  const expected = P === 2 ? [0x4000, 0x4400] : P === 4 ? [0x4400, 0x4800] : null;
  if (expected) expectEqual("float16 sum", Array.from(half), expected);
});

await check("reduceScatter sum with sizes, and mean", async () => {
  const sizes = Array.from({ length: P }, (_, j) => (j % 2) + 1);
  const total = sizes.reduce((a, b) => a + b, 0);
  const input = Tensor.from(
    "float32",
    [total, 2],
    Array.from({ length: total * 2 }, (_, k) => k + r),
  );
  const out = await world.reduceScatter(input, { sizes });
  let start = 0;
  for (let j = 0; j < r; j++) start += sizes[j]!;
  const sumRanks = (P * (P - 1)) / 2;
  expectEqual(
    "sum",
    numbers(out),
    Array.from({ length: sizes[r]! * 2 }, (_, k) => P * (start * 2 + k) + sumRanks),
  );
  const meanOut = await world.reduceScatter(
    Tensor.from(
      "float32",
      [P],
      Array.from({ length: P }, () => 2 * r),
    ),
    { op: "mean" },
  );
  expectEqual("mean", numbers(meanOut), [P - 1]);
});

await check("broadcast from the last rank, barrier", async () => {
  const t = Int32Array.from([r, r, r]);
  await world.broadcast(t, { root: P - 1 });
  expectEqual("data", Array.from(t), [P - 1, P - 1, P - 1]);
  await world.barrier();
});

await check("send/recv between neighbours", async () => {
  const peer = r ^ 1;
  const got = new Float32Array(4);
  const mine = Float32Array.from([r, r + 0.5, -r, 7]);
  if (r % 2 === 0) {
    await world.send(mine, peer, 3);
    await world.recv(got, peer, 4);
  } else {
    await world.recv(got, peer, 3);
    await world.send(mine, peer, 4);
  }
  expectEqual("data", Array.from(got), [peer, peer + 0.5, -peer, 7]);
});

await check("mismatched shapes reject on every rank with the same message; the group still works", async () => {
  const shape = r === 0 ? 4 : 5;
  const message = await world.allReduce(new Float32Array(shape)).then(
    () => "resolved",
    (e: Error) => (e instanceof CollectiveError ? e.message : `wrong error ${e.name}: ${e.message}`),
  );
  if (!message.includes("shapes differ")) throw new Error(`unexpected: ${message}`);
  const bytes = new TextEncoder().encode(message.padEnd(400).slice(0, 400));
  const all = await world.allGather(new Tensor("uint8", [1, 400], bytes));
  for (let j = 0; j < P; j++)
    expectEqual(`rank ${j}'s message`, new TextDecoder().decode(all.data.subarray(j * 400, j * 400 + 400)), message.padEnd(400).slice(0, 400));
});

await check("newGroup in reverse order, collectives inside it, non-members get null", async () => {
  const members = Array.from({ length: P }, (_, j) => P - 1 - j).filter((j) => j % 2 === 1);
  const sub: ProcessGroup | null = await world.newGroup(members);
  if (r % 2 === 0) return expectEqual("non-member", sub, null);
  expectEqual("rank", sub!.rank, members.indexOf(r));
  expectEqual("worldRanks", sub!.worldRanks, members);
  const t = Float32Array.from([r]);
  await sub!.allReduce(t);
  expectEqual(
    "sum of odd ranks",
    t[0],
    members.reduce((a, b) => a + b, 0),
  );
  const gathered = await sub!.allGather(Int32Array.from([r]));
  expectEqual("order", numbers(gathered), members);
  await sub!.destroy();
});

await check("the event loop runs while a rank waits in MPI for a late peer", async () => {
  const input = new Float32Array(P * 1024).fill(r);
  let ticks = 0;
  const timer = setInterval(() => ticks++, 10);
  if (r === 0) await new Promise((resolve) => setTimeout(resolve, 500)); // rank 0 arrives late
  const out = await world.allToAll(input);
  clearInterval(timer);
  // ranks other than 0 waited ~500 ms inside the collective: their timers kept
  // firing (a blocked JS thread would see at most 1 tick, fired after the wait)
  if (r !== 0 && ticks < 3) throw new Error(`only ${ticks} timer ticks while waiting 500 ms: the JS thread was blocked`);
  for (let j = 0; j < P; j++) expectEqual(`block ${j}`, [out.data[j * 1024], out.data[(j + 1) * 1024 - 1]], [j, j]);
});

// mpirun forwards the ranks' output in raw chunks (one rank's line can be cut
// by another's), so with a report folder each rank writes its own file
const report = (name: string, line: string) =>
  reportDir ? appendFileSync(join(reportDir, `${name}-${r}.jsonl`), `${line}\n`) : console.log(`${name} ${line}`);
report("ULYSSES_CHECKS", JSON.stringify({ rank: r, size: P, reduction, passed, failed: failures.length, failures }));
await runConformance(world, {
  onResult: (result) => report("ULYSSES_CONFORMANCE", JSON.stringify({ rank: r, size: P, result: { ...result, error: result.error?.slice(0, 1500) } })),
});
await world.destroy();
