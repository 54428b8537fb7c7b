import { describe, expect, it } from "vitest";
import { Tensor } from "@ulysses/tensors";
import { createLocalGroups } from "./local-group.js";
import { CollectiveError } from "../errors.js";

/** Rank r's value at (row i, column c): distinct per rank, row and column. */
const value = (r: number, i: number, c: number) => r * 1000 + i * 10 + c;

function rowsTensor(r: number, rows: number, cols: number): Tensor<"float32"> {
  const values: number[] = [];
  for (let i = 0; i < rows; i++) for (let c = 0; c < cols; c++) values.push(value(r, i, c));
  return Tensor.from("float32", [rows, cols], values);
}

describe("local backend", () => {
  it("allToAll with uneven splits and zero-size chunks matches a nested-array reference", async () => {
    // splits[src][dst]: rows rank src sends to rank dst
    const splits = [
      [1, 0, 2],
      [0, 3, 1],
      [2, 2, 0],
    ];
    const cols = 2;
    const groups = createLocalGroups(3);
    const outs = await Promise.all(
      groups.map((g, r) => {
        const rows = splits[r]!.reduce((a, b) => a + b, 0);
        const outputSplits = splits.map((row) => row[r]!);
        return g.allToAll(rowsTensor(r, rows, cols), { inputSplits: splits[r], outputSplits });
      }),
    );
    for (let r = 0; r < 3; r++) {
      const expected: number[] = [];
      for (let src = 0; src < 3; src++) {
        const start = splits[src]!.slice(0, r).reduce((a, b) => a + b, 0);
        for (let i = start; i < start + splits[src]![r]!; i++) for (let c = 0; c < cols; c++) expected.push(value(src, i, c));
      }
      expect(outs[r]!.shape).toEqual([expected.length / cols, cols]);
      expect(Array.from(outs[r]!.data as Float32Array)).toEqual(expected);
      // accounting: rows to other ranks times 8 bytes per row
      const sent = splits[r]!.reduce((acc, n, j) => acc + (j === r ? 0 : n * cols * 4), 0);
      const received = splits.reduce((acc, row, j) => acc + (j === r ? 0 : row[r]! * cols * 4), 0);
      expect(groups[r]!.stats().byOp.allToAll).toMatchObject({ calls: 1, bytesSent: sent, bytesReceived: received });
    }
  });

  it("allReduce, reduceScatter and broadcast match float64 references", async () => {
    const P = 4;
    const groups = createLocalGroups(P);
    const inputs = groups.map((_, r) => Float64Array.from({ length: 8 }, (_, i) => Math.sin(r * 8 + i)));
    const sums = Array.from({ length: 8 }, (_, i) => inputs.reduce((a, x) => a + x[i]!, 0));
    const copies = inputs.map((x) => x.slice());
    await Promise.all(groups.map((g, r) => g.allReduce(copies[r]!)));
    for (const c of copies) for (let i = 0; i < 8; i++) expect(c[i]).toBeCloseTo(sums[i]!, 12);
    const scattered = await Promise.all(groups.map((g, r) => g.reduceScatter(inputs[r]!, { op: "max" })));
    scattered.forEach((t, r) => {
      const want = [0, 1].map((k) => Math.max(...inputs.map((x) => x[r * 2 + k]!)));
      expect(Array.from(t.data as Float64Array)).toEqual(want);
    });
    const b = inputs.map((x) => x.slice());
    await Promise.all(groups.map((g, r) => g.broadcast(b[r]!, { root: 2 })));
    for (const x of b) expect(Array.from(x)).toEqual(Array.from(inputs[2]!));
  });

  it("rejects mismatched splits on every rank with the same message naming ranks and values", async () => {
    const groups = createLocalGroups(2);
    const results = await Promise.allSettled([
      groups[0]!.allToAll(rowsTensor(0, 4, 1), { inputSplits: [2, 2] }),
      groups[1]!.allToAll(rowsTensor(1, 4, 1), { inputSplits: [2, 2], outputSplits: [3, 1] }),
    ]);
    const messages = results.map((r) => (r.status === "rejected" ? (r.reason as Error).message : "resolved"));
    expect(messages[0]).toBe(messages[1]);
    expect(messages[0]).toContain("rank 1 expects 3 rows from rank 0");
    expect(results.every((r) => r.status === "rejected" && r.reason instanceof CollectiveError)).toBe(true);
  });

  it("a rank that never calls makes the others reject after the timeout, naming it", async () => {
    const groups = createLocalGroups(3, { timeoutMs: 50 });
    const results = await Promise.allSettled([groups[0]!.barrier(), groups[2]!.barrier()]);
    for (const r of results) {
      expect(r.status).toBe("rejected");
      expect((r as PromiseRejectedResult).reason.message).toContain("rank(s) 1 did not call within 50 ms");
    }
    await expect(groups[1]!.barrier()).rejects.toThrow(/failed earlier/);
  });

  it("send/recv and sub-groups", async () => {
    const groups = createLocalGroups(4);
    const subs = await Promise.all(groups.map((g) => g.newGroup([1, 3])));
    expect(subs.map((s) => s?.rank ?? null)).toEqual([null, 0, null, 1]);
    expect(subs[3]!.worldRanks).toEqual([1, 3]);
    const got = new Int32Array(3);
    await Promise.all([subs[1]!.send(Int32Array.from([7, 8, 9]), 1, 5), subs[3]!.recv(got, 0, 5)]);
    expect(Array.from(got)).toEqual([7, 8, 9]);
    expect(subs[1]!.stats().byOp.send).toMatchObject({ calls: 1, bytesSent: 12, elements: 3 });
    const bad = await Promise.allSettled([subs[1]!.send(new Int32Array(2), 1, 1), subs[3]!.recv(new Int32Array(2), 0, 2)]);
    expect(bad.map((r) => (r as PromiseRejectedResult).reason.message)).toEqual([expect.stringContaining("tag 1"), expect.stringContaining("tag 1")]);
  });

  it("a bad argument on one rank only (inputSplits not an array) rejects on every rank at once with the same message naming that rank", async () => {
    const groups = createLocalGroups(2, { timeoutMs: 5000 });
    const start = performance.now();
    const results = await Promise.allSettled([
      groups[0]!.allToAll(rowsTensor(0, 4, 1)),
      groups[1]!.allToAll(rowsTensor(1, 4, 1), { inputSplits: 2 as unknown as number[] }),
    ]);
    expect(performance.now() - start).toBeLessThan(500);
    const reasons = results.map((r) => (r as PromiseRejectedResult).reason as Error);
    for (const reason of reasons) expect(reason).toBeInstanceOf(CollectiveError);
    expect(reasons[0]!.message).toBe(
      "allToAll (call 1 on group of world ranks [0, 1]): rank 1: inputSplits must be an array of 2 non-negative integers (one per rank), got 2",
    );
    expect(reasons[1]!.message).toBe(reasons[0]!.message);
    await Promise.all(groups.map((g) => g.barrier()));
  });

  it("point-to-point: a bad tag rejects both sides with one message; a peer outside the group rejects the caller only, at once", async () => {
    const groups = createLocalGroups(2, { timeoutMs: 5000 });
    const bad = await Promise.allSettled([groups[0]!.send(new Float32Array(2), 1, 0.5), groups[1]!.recv(new Float32Array(2), 0, 0)]);
    const messages = bad.map((r) => ((r as PromiseRejectedResult).reason as Error).message);
    expect(messages).toEqual(Array(2).fill("send/recv from rank 0 to rank 1 refused: sender rank 0: tag 0.5 must be an integer"));
    const start = performance.now();
    await expect(groups[0]!.send(new Float32Array(2), 2)).rejects.toThrow(new CollectiveError("send on rank 0: peer 2 must be another rank of the group of 2"));
    await expect(groups[1]!.recv(new Float32Array(2), 1)).rejects.toThrow("recv on rank 1: peer 1 must be another rank of the group of 2");
    expect(performance.now() - start).toBeLessThan(500);
    const got = new Float32Array(2);
    await Promise.all([groups[0]!.send(Float32Array.from([1, 2]), 1), groups[1]!.recv(got, 0)]);
    expect(Array.from(got)).toEqual([1, 2]);
  });
});
