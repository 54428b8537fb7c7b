/**
 * FusedAttention against the float64 reference of @ulysses/kernels (the
 * living definition of LocalAttention) and against OrtAttention: forward out
 * and logSumExp, backward dq, dk, dv, to 1e-5 relative (max |error| over max
 * |expected|). Skipped, with the reason in the suite's name, only when the
 * native addon is not built.
 */
import { afterAll, describe, expect, it } from "vitest";
import { OrtAttention } from "@ulysses/kernels";
import { maxRelativeError, randomTensor, referenceBackward64, referenceForward64, seededRandom } from "@ulysses/kernels/testing";
import { Tensor } from "@ulysses/tensors";
import { FusedAttention, FusedAttentionError, fusedAttentionStatus, type CpuIsa } from "./index.js";

const status = fusedAttentionStatus();
const suite = status.available ? "FusedAttention" : `FusedAttention (skipped: ${status.reason})`;
if (!status.available) console.warn(`[fused-attention tests] ${status.reason}`);

const TOLERANCE = 1e-5;
const nativeIsa = status.available ? status.info.cpuIsa : "portable";

interface Case {
  batch: number;
  seqQ: number;
  seqK: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  causal: boolean;
  scale?: number;
}

// Block edges of the CPU kernels: AVX-512 96 queries x 96 keys forward, 64 x
// 192 backward; AVX2 48 x 48; portable 32 x 32. Rows of k 1 KiB apart or more
// (kvHeads x headDim >= 256) take the forward's packed-key path.
const CASES: Case[] = [
  { batch: 1, seqQ: 37, seqK: 37, heads: 4, kvHeads: 2, headDim: 16, causal: false },
  { batch: 1, seqQ: 37, seqK: 37, heads: 4, kvHeads: 2, headDim: 16, causal: true },
  { batch: 2, seqQ: 100, seqK: 100, heads: 4, kvHeads: 1, headDim: 64, causal: true },
  { batch: 2, seqQ: 100, seqK: 100, heads: 4, kvHeads: 1, headDim: 64, causal: false },
  { batch: 1, seqQ: 129, seqK: 129, heads: 2, kvHeads: 2, headDim: 32, causal: true },
  { batch: 1, seqQ: 37, seqK: 129, heads: 4, kvHeads: 2, headDim: 64, causal: true },
  { batch: 2, seqQ: 129, seqK: 37, heads: 4, kvHeads: 4, headDim: 64, causal: true },
  { batch: 2, seqQ: 200, seqK: 200, heads: 6, kvHeads: 3, headDim: 32, causal: true },
  // k rows 1 KiB or more apart (kvHeads x headDim >= 256): the forward copies each key block's rows together
  { batch: 1, seqQ: 200, seqK: 200, heads: 8, kvHeads: 8, headDim: 32, causal: true },
  { batch: 2, seqQ: 150, seqK: 300, heads: 16, kvHeads: 8, headDim: 32, causal: false },
  { batch: 1, seqQ: 100, seqK: 37, heads: 2, kvHeads: 1, headDim: 64, causal: false },
  { batch: 1, seqQ: 96, seqK: 96, heads: 2, kvHeads: 1, headDim: 64, causal: true },
  { batch: 1, seqQ: 97, seqK: 193, heads: 2, kvHeads: 2, headDim: 64, causal: true },
  { batch: 1, seqQ: 192, seqK: 192, heads: 1, kvHeads: 1, headDim: 128, causal: true },
  { batch: 1, seqQ: 65, seqK: 385, heads: 2, kvHeads: 1, headDim: 32, causal: true },
  { batch: 1, seqQ: 400, seqK: 400, heads: 2, kvHeads: 2, headDim: 32, causal: true },
  { batch: 1, seqQ: 49, seqK: 33, heads: 3, kvHeads: 1, headDim: 20, causal: false },
  { batch: 1, seqQ: 48, seqK: 65, heads: 2, kvHeads: 2, headDim: 37, causal: true, scale: 0.3 },
  { batch: 1, seqQ: 31, seqK: 31, heads: 2, kvHeads: 1, headDim: 8, causal: true, scale: -0.2 },
  { batch: 1, seqQ: 1, seqK: 1, heads: 1, kvHeads: 1, headDim: 1, causal: true },
];

const label = (c: Case): string =>
  `b${c.batch} q${c.seqQ} k${c.seqK} h${c.heads}/${c.kvHeads} d${c.headDim} ${c.causal ? "causal" : "full"}${c.scale === undefined ? "" : ` scale ${c.scale}`}`;

function inputs(c: Case, seed: number) {
  const random = seededRandom(seed);
  const q = randomTensor([c.batch, c.seqQ, c.heads, c.headDim], random, 2);
  const k = randomTensor([c.batch, c.seqK, c.kvHeads, c.headDim], random, 2);
  const v = randomTensor([c.batch, c.seqK, c.kvHeads, c.headDim], random);
  const dOut = randomTensor([c.batch, c.seqQ, c.heads, c.headDim], random);
  return { q, k, v, dOut };
}

function dimsOf(c: Case) {
  return { ...c, group: c.heads / c.kvHeads, scale: c.scale ?? 1 / Math.sqrt(c.headDim), offset: c.seqK - c.seqQ };
}

const f64 = (t: Tensor<"float32">) => Float64Array.from(t.data);

function relativeError(actual: Tensor<"float32">, expected: Float64Array): number {
  return maxRelativeError(actual, new Tensor("float64", actual.shape, expected));
}

/** logSumExp: -Infinity exactly where the reference has it, the rest to tolerance. */
function expectLogSumExp(actual: Tensor<"float32">, expected: Float64Array): void {
  const finite: number[] = [];
  for (let i = 0; i < expected.length; i++) {
    if (expected[i] === -Infinity) expect(actual.data[i], `logSumExp[${i}]`).toBe(-Infinity);
    else finite.push(i);
  }
  const a = new Tensor(
    "float32",
    [finite.length],
    Float32Array.from(finite, (i) => actual.data[i]!),
  );
  const e = new Tensor(
    "float64",
    [finite.length],
    Float64Array.from(finite, (i) => expected[i]!),
  );
  expect(maxRelativeError(a, e)).toBeLessThanOrEqual(TOLERANCE);
}

describe.skipIf(!status.available)(suite, () => {
  const kernels = new Map<string, FusedAttention>();
  const withThreads = (threads: number, isa: CpuIsa = "auto"): FusedAttention => {
    let k = kernels.get(`${threads}:${isa}`);
    if (!k) {
      k = new FusedAttention({ threads, isa });
      kernels.set(`${threads}:${isa}`, k);
    }
    return k;
  };
  afterAll(() => kernels.forEach((k) => k.release()));
  // Every instruction set this processor runs (the portable one always).
  const isas = (["avx512", "avx2", "portable"] as const).filter((isa) => {
    try {
      withThreads(1, isa);
      return true;
    } catch (error) {
      if (/cannot run/.test((error as Error).message)) return false;
      throw error;
    }
  });

  CASES.forEach((c, n) => {
    it(`matches the float64 reference: ${label(c)}`, async () => {
      const { q, k, v, dOut } = inputs(c, 100 + n);
      const dims = dimsOf(c);
      const ref = referenceForward64(f64(q), f64(k), f64(v), dims);
      const refGrad = referenceBackward64(f64(q), f64(k), f64(v), f64(dOut), dims);
      // Thread counts 1-3 on the processor's own kernels; the others (whose
      // threading code is the same) on 2.
      const runs = isas.flatMap((isa) => (isa === nativeIsa ? [1, 2, 3] : [2]).map((t) => [t, isa] as const));
      for (const [threads, isa] of runs) {
        const fused = withThreads(threads, isa);
        const options = { causal: c.causal, scale: c.scale };
        const { out, logSumExp } = await fused.forward(q, k, v, options);
        expect(out.shape).toEqual(q.shape);
        expect(logSumExp.shape).toEqual([c.batch, c.heads, c.seqQ]);
        expect(relativeError(out, ref.out), `out, ${isa} ${threads} threads`).toBeLessThanOrEqual(TOLERANCE);
        expectLogSumExp(logSumExp, ref.logSumExp);
        const g = await fused.backward(q, k, v, out, dOut, logSumExp, options);
        expect(relativeError(g.dq, refGrad.dq), `dq, ${isa} ${threads} threads`).toBeLessThanOrEqual(TOLERANCE);
        expect(relativeError(g.dk, refGrad.dk), `dk, ${isa} ${threads} threads`).toBeLessThanOrEqual(TOLERANCE);
        expect(relativeError(g.dv, refGrad.dv), `dv, ${isa} ${threads} threads`).toBeLessThanOrEqual(TOLERANCE);
      }
    });
  });

  it("matches OrtAttention (causal GQA, seqQ < seqK)", async () => {
    const c: Case = { batch: 2, seqQ: 70, seqK: 101, heads: 4, kvHeads: 2, headDim: 32, causal: true };
    const { q, k, v, dOut } = inputs(c, 7);
    const ort = new OrtAttention({ blockRows: 32 });
    try {
      const fused = withThreads(2);
      const a = await fused.forward(q, k, v, { causal: true });
      const b = await ort.forward(q, k, v, { causal: true });
      expect(maxRelativeError(a.out, b.out)).toBeLessThanOrEqual(TOLERANCE);
      expect(maxRelativeError(a.logSumExp, b.logSumExp)).toBeLessThanOrEqual(TOLERANCE);
      const ga = await fused.backward(q, k, v, a.out, dOut, a.logSumExp, { causal: true });
      const gb = await ort.backward(q, k, v, b.out, dOut, b.logSumExp, { causal: true });
      for (const key of ["dq", "dk", "dv"] as const) expect(maxRelativeError(ga[key], gb[key]), key).toBeLessThanOrEqual(TOLERANCE);
    } finally {
      await ort.release();
    }
  });

  it("has found the instruction sets to test", () => {
    expect(isas).toContain("portable");
    expect(isas).toContain(nativeIsa);
  });

  it("gives bit-identical forwards on 1 and 2 threads and repeatable backwards", async () => {
    const c: Case = { batch: 1, seqQ: 300, seqK: 300, heads: 2, kvHeads: 1, headDim: 64, causal: true };
    const { q, k, v, dOut } = inputs(c, 11);
    const one = await withThreads(1).forward(q, k, v, c);
    const two = await withThreads(2).forward(q, k, v, c);
    expect(Buffer.compare(Buffer.from(one.out.data.buffer), Buffer.from(two.out.data.buffer))).toBe(0);
    expect(Buffer.compare(Buffer.from(one.logSumExp.data.buffer), Buffer.from(two.logSumExp.data.buffer))).toBe(0);
    const g1 = await withThreads(2).backward(q, k, v, one.out, dOut, one.logSumExp, c);
    const g2 = await withThreads(2).backward(q, k, v, one.out, dOut, one.logSumExp, c);
    for (const key of ["dq", "dk", "dv"] as const) expect(Buffer.compare(Buffer.from(g1[key].data.buffer), Buffer.from(g2[key].data.buffer))).toBe(0);
  });

  it("gives bit-identical backwards on 1, 2 and 3 threads with at least 2 (batch, kv head) groups per thread", async () => {
    // 7 groups, each on one thread, which owns its dq rows, whatever the thread count (7 is no multiple of 2 or 3, and
    // 400 keys are 3 key blocks: dealt round-robin by key block, a group's blocks would land on different threads)
    const c: Case = { batch: 1, seqQ: 400, seqK: 400, heads: 14, kvHeads: 7, headDim: 32, causal: true };
    const { q, k, v, dOut } = inputs(c, 12);
    const { out, logSumExp } = await withThreads(1).forward(q, k, v, c);
    const [g1, g2, g3] = await Promise.all([1, 2, 3].map((t) => withThreads(t).backward(q, k, v, out, dOut, logSumExp, c)));
    for (const key of ["dq", "dk", "dv"] as const) {
      expect(Buffer.compare(Buffer.from(g1![key].data.buffer), Buffer.from(g2![key].data.buffer)), `${key}, 2 threads`).toBe(0);
      expect(Buffer.compare(Buffer.from(g1![key].data.buffer), Buffer.from(g3![key].data.buffer)), `${key}, 3 threads`).toBe(0);
    }
  });

  it("runs on the calling thread with onCallerThread: the same bits as on the pool, and no event-loop turn meanwhile", async () => {
    const c: Case = { batch: 1, seqQ: 1024, seqK: 1024, heads: 4, kvHeads: 2, headDim: 32, causal: true };
    const { q, k, v, dOut } = inputs(c, 13);
    const fused = withThreads(2);
    // an immediate runs at the event loop's next check phase: before a pool run's completion can arrive, never inside a blocking call
    const turns = async <T>(run: () => Promise<T>): Promise<{ result: T; turned: boolean }> => {
      let turned = false;
      setImmediate(() => {
        turned = true;
      });
      const result = await run();
      return { result, turned };
    };
    const pool = await turns(() => fused.forward(q, k, v, { causal: true }));
    const caller = await turns(() => fused.forward(q, k, v, { causal: true, onCallerThread: true }));
    expect(pool.turned).toBe(true);
    expect(caller.turned).toBe(false);
    for (const key of ["out", "logSumExp"] as const)
      expect(Buffer.compare(Buffer.from(pool.result[key].data.buffer), Buffer.from(caller.result[key].data.buffer))).toBe(0);
    const out = caller.result.out;
    const lse = caller.result.logSumExp;
    const poolGrad = await turns(() => fused.backward(q, k, v, out, dOut, lse, { causal: true }));
    const callerGrad = await turns(() => fused.backward(q, k, v, out, dOut, lse, { causal: true, onCallerThread: true }));
    expect(poolGrad.turned).toBe(true);
    expect(callerGrad.turned).toBe(false);
    for (const key of ["dq", "dk", "dv"] as const)
      expect(Buffer.compare(Buffer.from(poolGrad.result[key].data.buffer), Buffer.from(callerGrad.result[key].data.buffer))).toBe(0);
    // and the caller-thread results against the float64 reference, not only against the pool's
    const ref = referenceForward64(f64(q), f64(k), f64(v), dimsOf(c));
    const refGrad = referenceBackward64(f64(q), f64(k), f64(v), f64(dOut), dimsOf(c));
    expect(relativeError(out, ref.out)).toBeLessThanOrEqual(TOLERANCE);
    expectLogSumExp(lse, ref.logSumExp);
    for (const key of ["dq", "dk", "dv"] as const) expect(relativeError(callerGrad.result[key], refGrad[key]), key).toBeLessThanOrEqual(TOLERANCE);
    // past callerThreadMaxPairs (here 1024 x 1024 / 2 x 4 heads = 2^21 pairs against 2^21 - 1) the call goes to the pool anyway
    const capped = new FusedAttention({ threads: 2, callerThreadMaxPairs: 2 ** 21 - 1 });
    const atCap = new FusedAttention({ threads: 2, callerThreadMaxPairs: 2 ** 21 });
    try {
      const over = await turns(() => capped.forward(q, k, v, { causal: true, onCallerThread: true }));
      const at = await turns(() => atCap.forward(q, k, v, { causal: true, onCallerThread: true }));
      expect(over.turned).toBe(true);
      expect(at.turned).toBe(false);
      expect(Buffer.compare(Buffer.from(over.result.out.data.buffer), Buffer.from(pool.result.out.data.buffer))).toBe(0);
    } finally {
      capped.release();
      atCap.release();
    }
    expect(() => new FusedAttention({ callerThreadMaxPairs: Number.NaN })).toThrow(/callerThreadMaxPairs must be a number >= 0, got NaN/);
    // an onCallerThread that is not a boolean is refused, naming the value
    const none = new Tensor("float32", [1, 0, 2, 4]);
    await expect(fused.forward(none, none, none, { causal: true, onCallerThread: "yes" as never })).rejects.toThrow(
      /onCallerThread must be a boolean, got yes/,
    );
  });

  it("runs on SharedArrayBuffer-backed tensors", async () => {
    const c: Case = { batch: 1, seqQ: 40, seqK: 40, heads: 2, kvHeads: 2, headDim: 16, causal: true };
    const { q, k, v } = inputs(c, 5);
    const plain = await withThreads(1).forward(q, k, v, c);
    const shared = await withThreads(1).forward(q.clone({ shared: true }), k.clone({ shared: true }), v.clone({ shared: true }), c);
    expect(Array.from(shared.out.data)).toEqual(Array.from(plain.out.data));
  });

  it("runs concurrent calls on one instance", async () => {
    const cases = CASES.slice(0, 4);
    const fused = withThreads(2);
    const results = await Promise.all(cases.map((c, n) => fused.forward(inputs(c, 100 + n).q, inputs(c, 100 + n).k, inputs(c, 100 + n).v, c)));
    results.forEach((r, n) => {
      const c = cases[n]!;
      const { q, k, v } = inputs(c, 100 + n);
      expect(relativeError(r.out, referenceForward64(f64(q), f64(k), f64(v), dimsOf(c)).out)).toBeLessThanOrEqual(TOLERANCE);
    });
  });

  it("handles empty sequences: no keys gives out 0 and logSumExp -Infinity", async () => {
    const fused = withThreads(2);
    const q = new Tensor("float32", [1, 3, 2, 4]);
    q.data.fill(0.5);
    const none = new Tensor("float32", [1, 0, 2, 4]);
    const r = await fused.forward(q, none, none, { causal: false });
    expect(Array.from(r.out.data)).toEqual(new Array(24).fill(0));
    expect(Array.from(r.logSumExp.data)).toEqual(new Array(6).fill(-Infinity));
    const g = await fused.backward(q, none, none, r.out, q, r.logSumExp, { causal: false });
    expect(Array.from(g.dq.data)).toEqual(new Array(24).fill(0));
    expect(g.dk.shape).toEqual([1, 0, 2, 4]);
    const noQueries = await fused.forward(none, q, q, { causal: true });
    expect(noQueries.out.shape).toEqual([1, 0, 2, 4]);
    expect(noQueries.logSumExp.shape).toEqual([1, 2, 0]);
  });

  it("rejects mismatched shapes with the offending values", async () => {
    const fused = withThreads(1);
    const q = new Tensor("float32", [1, 4, 3, 8]);
    const k = new Tensor("float32", [1, 4, 2, 8]);
    await expect(fused.forward(q, k, k, { causal: false })).rejects.toThrow(/heads \(3\) must be a multiple of kvHeads \(2\)/);
    const q2 = new Tensor("float32", [1, 4, 2, 8]);
    const bad = new Tensor("float32", [1, 2, 3]);
    await expect(fused.backward(q2, k, k, q2, q2, bad, { causal: true })).rejects.toThrow(FusedAttentionError);
    await expect(fused.backward(q2, k, k, q2, q2, bad, { causal: true })).rejects.toThrow(
      /^FusedAttention\.backward: logSumExp must be float32 \[1, 2, 4\], got float32 \[1, 2, 3\]$/,
    );
    await expect(fused.forward(q2, k, new Tensor("float32", [1, 5, 2, 8]), { causal: false })).rejects.toThrow(
      /^FusedAttention\.forward: v float32 \[1, 5, 2, 8\] does not match k float32 \[1, 4, 2, 8\]/,
    );
    expect(() => new FusedAttention({ threads: 0 })).toThrow(/threads must be an integer >= 1, got 0/);
    expect(() => new FusedAttention({ threads: 1, isa: "sse" as CpuIsa })).toThrow(/isa must be auto, avx512, avx2 or portable, got 'sse'/);
  });

  it("runs on the CUDA provider, or says why it cannot", async () => {
    let fused: FusedAttention;
    try {
      fused = new FusedAttention({ threads: 1, executionProvider: "cuda" });
    } catch (error) {
      expect((error as Error).message).toMatch(
        /needs the addon built with nvcc|onnxruntime-node has no CUDA binaries here|CUDA execution provider could not be added/,
      );
      return;
    }
    try {
      const c = CASES[2]!;
      const { q, k, v } = inputs(c, 102);
      const { out } = await fused.forward(q, k, v, c);
      expect(relativeError(out, referenceForward64(f64(q), f64(k), f64(v), dimsOf(c)).out)).toBeLessThanOrEqual(TOLERANCE);
    } finally {
      fused.release();
    }
  });

  it("fails after release with a clear error", async () => {
    const fused = new FusedAttention({ threads: 1 });
    fused.release();
    const q = new Tensor("float32", [1, 2, 1, 4]);
    await expect(fused.forward(q, q, q, { causal: false })).rejects.toThrow(/used after release/);
  });
});
