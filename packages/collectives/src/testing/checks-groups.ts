/**
 * Conformance checks of everything but bulk data movement: barrier,
 * send/recv, sub-groups (newGroup, splitWorld), exact accounting, and the
 * error cases, where every rank must reject with the same message.
 */
import { Tensor } from "@ulysses/tensors";
import { CollectiveError } from "../errors.js";
import type { ProcessGroup } from "../types.js";
import type { ConformanceCheck } from "./check.js";
import { unevenRows } from "./checks-data.js";
import { expectData, expectSameOnAllRanks, expectTrue, fill, ranksOf, rejection, sum, value } from "./data.js";
import { splitWorld } from "../split-world.js";

async function sendRecvRing(group: ProcessGroup): Promise<void> {
  const P = group.size;
  const r = group.rank;
  const next = (r + 1) % P;
  const prev = (r + P - 1) % P;
  const out = fill("float64", [5], (i) => value(r, i, 4));
  const got = new Tensor("float64", [5]);
  // even ranks send first, odd ranks receive first (sends complete when received)
  if (r % 2 === 0) {
    await group.send(out, next, 7);
    await group.recv(got, prev, 7);
  } else {
    await group.recv(got, prev, 7);
    await group.send(out, next, 7);
  }
  expectData(
    `recv on rank ${r}`,
    got,
    "float64",
    [5],
    Array.from({ length: 5 }, (_, i) => value(prev, i, 4)),
  );
}

async function sendRecvMismatch(group: ProcessGroup): Promise<void> {
  const sub = await group.newGroup([0, 1]);
  if (!sub) return;
  const message =
    group.rank === 0
      ? await rejection("send with a mismatched tag", () => group.send(new Float32Array(4), 1, 1))
      : await rejection("recv with a mismatched tag", () => group.recv(new Float32Array(4), 0, 2));
  expectTrue(message.includes("tag 1") && message.includes("tag 2"), `mismatch message should name both tags: ${message}`);
  await expectSameOnAllRanks(sub, "send/recv mismatch message", message);
}

async function newGroups(group: ProcessGroup): Promise<void> {
  const P = group.size;
  const r = group.rank;
  const evens = ranksOf(P).filter((x) => x % 2 === 0);
  const odds = ranksOf(P).filter((x) => x % 2 === 1);
  const gEven = await group.newGroup(evens);
  const gOdd = odds.length ? await group.newGroup(odds) : null;
  const mine = r % 2 === 0 ? gEven : gOdd;
  expectTrue((r % 2 === 0 ? gOdd : gEven) === null, `rank ${r} got a group it is not a member of`);
  const members = r % 2 === 0 ? evens : odds;
  expectTrue(mine !== null && mine.size === members.length && mine.rank === members.indexOf(r), `rank ${r}: wrong sub-group rank/size`);
  const worldRanks = members.map((m) => group.worldRanks[m]!);
  expectTrue(
    mine!.worldRanks.join(",") === worldRanks.join(","),
    `rank ${r}: sub-group worldRanks [${mine!.worldRanks.join(", ")}], expected [${worldRanks.join(", ")}]`,
  );
  const t = Int32Array.from([r, 1]);
  await mine!.allReduce(t);
  expectTrue(t[0] === sum(members) && t[1] === members.length, `rank ${r}: sub-group allReduce gave [${Array.from(t).join(", ")}]`);
  // a nested sub-group: the first member alone
  const solo = await mine!.newGroup([0]);
  expectTrue((solo !== null) === (mine!.rank === 0), `rank ${r}: nested newGroup membership`);
  if (solo) expectTrue((await solo.allGather(Int32Array.from([r]))).data[0] === r, "nested single-rank allGather");
}

async function splitWorldCheck(group: ProcessGroup): Promise<void> {
  const P = group.size;
  const r = group.rank;
  for (let sp = 1; sp <= P; sp++) {
    if (P % sp !== 0) continue;
    const dp = P / sp;
    const { sp: spGroup, dp: dpGroup } = await splitWorld(group, { sp, dp });
    const d = Math.floor(r / sp);
    const s = r % sp;
    expectTrue(
      spGroup.size === sp && spGroup.rank === s && dpGroup.size === dp && dpGroup.rank === d,
      `splitWorld sp=${sp} dp=${dp}: rank ${r} got sp rank ${spGroup.rank}/${spGroup.size}, dp rank ${dpGroup.rank}/${dpGroup.size}`,
    );
    const a = Float64Array.from([r]);
    await spGroup.allReduce(a);
    const b = Float64Array.from([r]);
    await dpGroup.allReduce(b);
    expectTrue(
      a[0] === sum(ranksOf(sp).map((x) => d * sp + x)) && b[0] === sum(ranksOf(dp).map((x) => x * sp + s)),
      `splitWorld sp=${sp} dp=${dp}: sums ${a[0]}, ${b[0]} on rank ${r}`,
    );
  }
  let message = "";
  try {
    await splitWorld(group, { sp: P + 1, dp: 2 });
  } catch (e) {
    message = e instanceof CollectiveError ? e.message : `not a CollectiveError: ${String(e)}`;
  }
  expectTrue(
    message.includes(`sp (${P + 1})`) && message.includes("dp (2)") && message.includes(`(${P})`),
    `splitWorld error should name sp, dp and the world size: "${message}"`,
  );
}

async function accounting(group: ProcessGroup): Promise<void> {
  const P = group.size;
  const r = group.rank;
  group.resetStats();
  // allToAll float32, rows of 2 elements (8 bytes), uneven splits
  const inRows = sum(ranksOf(P).map((d) => unevenRows(r, d)));
  await group.allToAll(new Tensor("float32", [inRows, 2]), { inputSplits: ranksOf(P).map((d) => unevenRows(r, d)) });
  const a2aSent = sum(ranksOf(P).map((d) => (d === r ? 0 : unevenRows(r, d) * 8)));
  const a2aRecv = sum(ranksOf(P).map((s) => (s === r ? 0 : unevenRows(s, r) * 8)));
  // allGather float64: rank j contributes j+1 rows of 8 bytes
  await group.allGather(new Tensor("float64", [r + 1]), { sizes: ranksOf(P).map((j) => j + 1) });
  const agSent = (r + 1) * 8 * (P - 1);
  const agRecv = sum(ranksOf(P).map((j) => (j === r ? 0 : (j + 1) * 8)));
  // reduceScatter int32, rows of 4 bytes: rank j gets j+1 rows
  const rsSizes = ranksOf(P).map((j) => j + 1);
  await group.reduceScatter(new Tensor("int32", [sum(rsSizes)]), { sizes: rsSizes });
  const rsSent = (sum(rsSizes) - rsSizes[r]!) * 4;
  const rsRecv = rsSizes[r]! * 4 * (P - 1);
  // allReduce of 10 float32: element chunks floor/ceil of 10 / P, the first ones larger
  await group.allReduce(new Float32Array(10));
  const chunk = Math.floor(10 / P) + (r < 10 % P ? 1 : 0);
  const arBytes = (10 - chunk) * 4 + chunk * 4 * (P - 1);
  // broadcast of 6 int64 from root 0
  await group.broadcast(new BigInt64Array(6), { root: 0 });
  const bcSent = r === 0 ? 48 * (P - 1) : 0;
  const bcRecv = r === 0 ? 0 : 48;
  await group.barrier();
  const s = group.stats();
  const expect = (op: keyof typeof s.byOp, calls: number, sent: number, received: number, elements: number) => {
    const got = s.byOp[op];
    expectTrue(
      got.calls === calls && got.bytesSent === sent && got.bytesReceived === received && got.elements === elements,
      `rank ${r} ${op} stats ${JSON.stringify(got)}, expected calls ${calls} sent ${sent} received ${received} elements ${elements}`,
    );
    expectTrue(got.timeMs >= 0, `${op} timeMs ${got.timeMs}`);
  };
  expect("allToAll", 1, a2aSent, a2aRecv, inRows * 2);
  expect("allGather", 1, agSent, agRecv, r + 1);
  expect("reduceScatter", 1, rsSent, rsRecv, sum(rsSizes));
  expect("allReduce", 1, arBytes, arBytes, 10);
  expect("broadcast", 1, bcSent, bcRecv, 6);
  expect("barrier", 1, 0, 0, 0);
  const total = s.total;
  expectTrue(total.calls === 6 && total.bytesSent === a2aSent + agSent + rsSent + arBytes + bcSent, `rank ${r} total ${JSON.stringify(total)}`);
  if (P >= 2 && r < 2) {
    group.resetStats();
    if (r === 0) await group.send(new Float32Array(3), 1);
    else await group.recv(new Float32Array(3), 0);
    const p2p = group.stats().byOp;
    expectTrue(
      r === 0 ? p2p.send.bytesSent === 12 && p2p.send.calls === 1 : p2p.recv.bytesReceived === 12 && p2p.recv.calls === 1,
      `rank ${r} send/recv stats ${JSON.stringify(p2p)}`,
    );
  }
  group.resetStats();
  expectTrue(group.stats().total.calls === 0, "resetStats did not clear the counters");
}

/** Every rank runs `bad` (different arguments per rank), expects a rejection naming `mustMention`, identical on all ranks. */
function errorCase(name: string, bad: (g: ProcessGroup) => Promise<unknown>, mustMention: (P: number) => string[]): ConformanceCheck {
  return {
    name,
    minSize: 2,
    async run(group) {
      const message = await rejection(name, () => bad(group));
      for (const word of mustMention(group.size)) expectTrue(message.includes(word), `${name}: message should mention "${word}": ${message}`);
      await expectSameOnAllRanks(group, name, message);
      // the group still works after a rejected call
      const t = Int32Array.from([1]);
      await group.allReduce(t);
      expectTrue(t[0] === group.size, `${name}: allReduce after the error gave ${t[0]}`);
    },
  };
}

export const GROUP_CHECKS: readonly ConformanceCheck[] = [
  {
    name: "barrier",
    async run(g) {
      await g.barrier();
      await g.barrier();
    },
  },
  { name: "sendRecv/ring", minSize: 2, run: sendRecvRing },
  { name: "sendRecv/mismatch-rejects-both", minSize: 2, run: sendRecvMismatch },
  { name: "subGroups/newGroup", run: newGroups },
  { name: "subGroups/splitWorld", run: splitWorldCheck },
  { name: "accounting/exact", run: accounting },
  errorCase(
    "errors/dtype-mismatch",
    (g) => g.allReduce(g.rank === 1 ? new Float64Array(4) : new Float32Array(4)),
    () => ["rank 0 float32", "rank 1 float64"],
  ),
  errorCase(
    "errors/shape-mismatch",
    (g) => g.allGather(new Tensor("float32", [2, g.rank === 1 ? 3 : 4])),
    () => ["[2, 4]", "[2, 3]"],
  ),
  errorCase(
    "errors/split-sum",
    (g) => g.allToAll(new Tensor("float32", [g.size, 2]), { inputSplits: ranksOf(g.size).map((d) => (g.rank === 1 && d === 0 ? 2 : 1)) }),
    (P) => ["rank 1", `sum to ${P + 1}`, `${P} rows`],
  ),
  errorCase(
    "errors/split-pairing",
    (g) => g.allToAll(new Tensor("float32", [g.size]), { outputSplits: ranksOf(g.size).map((s) => (g.rank === 0 && s === 1 ? 2 : 1)) }),
    () => ["rank 0 expects 2 rows from rank 1", "rank 1 sends 1"],
  ),
  errorCase(
    "errors/operation-mismatch",
    (g) => (g.rank === 0 ? g.barrier() : g.allReduce(new Float32Array(1))),
    () => ["barrier", "allReduce"],
  ),
  errorCase(
    "errors/caller-output-shape",
    (g) => g.allGather(new Float32Array(2), { output: new Tensor("float32", [g.rank === 0 ? 5 : 2 * g.size]) }),
    (P) => ["rank 0", "[5]", `[${2 * P}]`],
  ),
];
