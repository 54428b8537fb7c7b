/**
 * Document masking (AttentionOptions.documents: packed variable-length
 * documents) in FusedAttention, against two independent references computed
 * one document at a time and stitched back together: the float64 reference
 * of @ulysses/kernels, and FusedAttention itself without documents. Forward
 * out and logSumExp, backward dq, dk, dv, to 1e-5 relative; causal and not,
 * grouped-query heads, batch rows packed differently, document lengths that
 * are no multiple of any block size (AVX-512 96 forward, 64 and 192 backward;
 * AVX2 48; portable 32), seqQ <
 * seqK (all-gather-KV: the queries are the last seqQ keys), on every
 * instruction set this processor runs. ReferenceAttention with the documents
 * (the contract's own definition) is a third reference. Skipped, with the reason in the suite's
 * name, only when the native addon is not built.
 */
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { ReferenceAttention, type AttentionDocuments } from "@ulysses/kernels";
import { maxRelativeError, randomTensor, seededRandom } from "@ulysses/kernels/testing";
import { Tensor } from "@ulysses/tensors";
import { FusedAttention, FusedAttentionError, fusedAttentionStatus, type CpuIsa } from "./index.js";
import { stitchedAttention, stitchedReference64, type StitchProblem, type Stitched } from "./testing-fixtures/stitch-documents.js";

const OP_CHECKS = join(dirname(fileURLToPath(import.meta.url)), "testing-fixtures", "op-document-checks.ts");

const status = fusedAttentionStatus();
const suite = status.available ? "FusedAttention with documents" : `FusedAttention with documents (skipped: ${status.reason})`;

const TOLERANCE = 1e-5;
const nativeIsa = status.available ? status.info.cpuIsa : "portable";

interface DocumentCase {
  heads: number;
  kvHeads: number;
  headDim: number;
  causal: boolean;
  /** Per batch row, the lengths of its documents in key positions (each row sums to seqK). */
  lengths: number[][];
  /** Per batch row, the id of its first document (ids then count up by `step`). */
  firstIds?: number[];
  step?: number;
  /** The queries are the last seqQ key positions (default: all of them). */
  seqQ?: number;
  scale?: number;
}

const CASES: DocumentCase[] = [
  { heads: 4, kvHeads: 2, headDim: 16, causal: true, lengths: [[1, 3, 65, 200, 31]] },
  { heads: 4, kvHeads: 2, headDim: 16, causal: false, lengths: [[1, 3, 65, 200, 31]] },
  // Two rows packed differently, ids not starting at 0 and with gaps.
  {
    heads: 2,
    kvHeads: 1,
    headDim: 32,
    causal: true,
    lengths: [
      [100, 1, 96, 3],
      [48, 49, 97, 6],
    ],
    firstIds: [0, 5],
    step: 3,
  },
  {
    heads: 2,
    kvHeads: 1,
    headDim: 32,
    causal: false,
    lengths: [
      [100, 1, 96, 3],
      [48, 49, 97, 6],
    ],
    firstIds: [0, 5],
    step: 3,
  },
  // All-gather-KV: the 120 queries are the last keys; row 1's first document has no query (zero dk, dv).
  {
    heads: 4,
    kvHeads: 1,
    headDim: 20,
    causal: true,
    lengths: [
      [70, 130, 50],
      [5, 200, 45],
    ],
    seqQ: 120,
  },
  {
    heads: 4,
    kvHeads: 1,
    headDim: 20,
    causal: false,
    lengths: [
      [70, 130, 50],
      [5, 200, 45],
    ],
    seqQ: 120,
    scale: 0.3,
  },
  // Many short documents: most blocks straddle a boundary.
  { heads: 3, kvHeads: 3, headDim: 8, causal: true, lengths: [[2, 1, 7, 5, 33, 17, 1, 64, 9, 11]] },
];

const label = (c: DocumentCase): string =>
  `lengths ${c.lengths.map((row) => row.join("+")).join(" | ")}${c.seqQ === undefined ? "" : `, last ${c.seqQ} queries`} h${c.heads}/${c.kvHeads} d${c.headDim} ${c.causal ? "causal" : "full"}${c.scale === undefined ? "" : ` scale ${c.scale}`}`;

/** Document ids per key position, and the queries' (the last seqQ positions of each row). */
function documentsOf(c: DocumentCase): { documents: AttentionDocuments; seqQ: number; seqK: number } {
  const seqK = c.lengths[0]!.reduce((a, b) => a + b, 0);
  const seqQ = c.seqQ ?? seqK;
  const key = new Int32Array(c.lengths.length * seqK);
  const query = new Int32Array(c.lengths.length * seqQ);
  c.lengths.forEach((row, b) => {
    if (row.reduce((a, x) => a + x, 0) !== seqK) throw new Error(`test case: row ${b} has ${row} keys, not ${seqK}`);
    let j = 0;
    row.forEach((length, n) => {
      key.fill((c.firstIds?.[b] ?? 0) + n * (c.step ?? 1), b * seqK + j, b * seqK + j + length);
      j += length;
    });
    query.set(key.subarray(b * seqK + seqK - seqQ, (b + 1) * seqK), b * seqQ);
  });
  return { documents: { query, key }, seqQ, seqK };
}

function problem(c: DocumentCase, seed: number): StitchProblem {
  const { documents, seqQ, seqK } = documentsOf(c);
  const batch = c.lengths.length;
  const random = seededRandom(seed);
  const q = randomTensor([batch, seqQ, c.heads, c.headDim], random, 2);
  const k = randomTensor([batch, seqK, c.kvHeads, c.headDim], random, 2);
  const v = randomTensor([batch, seqK, c.kvHeads, c.headDim], random);
  const dOut = randomTensor([batch, seqQ, c.heads, c.headDim], random);
  return { q, k, v, dOut, documents, causal: c.causal, scale: c.scale };
}

const asTensor = (like: Tensor<"float32">, values: Float64Array) => new Tensor("float64", like.shape, values);

interface Results {
  out: Tensor<"float32">;
  logSumExp: Tensor<"float32">;
  dq: Tensor<"float32">;
  dk: Tensor<"float32">;
  dv: Tensor<"float32">;
}

function expectClose(actual: Results, expected: Stitched, what: string): void {
  for (const key of ["out", "logSumExp", "dq", "dk", "dv"] as const) {
    expect(maxRelativeError(actual[key], asTensor(actual[key], expected[key])), `${key} vs ${what}`).toBeLessThanOrEqual(TOLERANCE);
  }
}

/** Forward and backward of `p` with `documents` (undefined: none). */
async function run(attention: FusedAttention, p: StitchProblem, documents: AttentionDocuments | undefined): Promise<Results> {
  const options = { causal: p.causal, scale: p.scale, documents };
  const { out, logSumExp } = await attention.forward(p.q, p.k, p.v, options);
  return { out, logSumExp, ...(await attention.backward(p.q, p.k, p.v, out, p.dOut, logSumExp, options)) };
}

/** ReferenceAttention of @ulysses/kernels (float64 inside) with the documents, as float64 arrays. */
async function referenceWithDocuments(p: StitchProblem): Promise<Stitched> {
  const reference = new ReferenceAttention();
  const options = { causal: p.causal, scale: p.scale, documents: p.documents };
  const { out, logSumExp } = await reference.forward(p.q, p.k, p.v, options);
  const g = await reference.backward(p.q, p.k, p.v, out, p.dOut, logSumExp, options);
  const f64 = (t: Tensor<"float32">) => Float64Array.from(t.data);
  return { out: f64(out), logSumExp: f64(logSumExp), dq: f64(g.dq), dk: f64(g.dk), dv: f64(g.dv) };
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
  const isas = (["avx512", "avx2", "portable"] as const).filter((isa) => {
    try {
      withThreads(1, isa);
      return true;
    } catch (error) {
      if (/cannot run/.test((error as Error).message)) return false;
      throw error;
    }
  });
  // Thread counts 1 and 3 on the processor's own kernels, 2 on the others.
  const runs = isas.flatMap((isa) => (isa === nativeIsa ? [1, 3] : [2]).map((t) => [t, isa] as const));

  CASES.forEach((c, n) => {
    it(`matches each document run alone (float64 reference, and fused without documents), and ReferenceAttention: ${label(c)}`, async () => {
      const p = problem(c, 200 + n);
      const stitched = await stitchedReference64(p);
      const reference = await referenceWithDocuments(p);
      for (const [threads, isa] of runs) {
        const fused = withThreads(threads, isa);
        const actual = await run(fused, p, p.documents);
        expectClose(actual, stitched, `the float64 reference per document, ${isa} ${threads} threads`);
        expectClose(actual, await stitchedAttention(p, fused), `fused per document, ${isa} ${threads} threads`);
        expectClose(actual, reference, `ReferenceAttention with documents, ${isa} ${threads} threads`);
      }
    });
  });

  it("with one document per row gives the bits of a call without documents", async () => {
    for (const c of [CASES[0]!, CASES[4]!]) {
      const p = problem(c, 7);
      const one = { query: new Int32Array(p.documents.query.length).fill(4), key: new Int32Array(p.documents.key.length).fill(4) };
      for (const [threads, isa] of runs) {
        const fused = withThreads(threads, isa);
        const plain = await run(fused, p, undefined);
        const single = await run(fused, p, one);
        for (const key of ["out", "logSumExp", "dq", "dk", "dv"] as const) {
          expect(Buffer.compare(Buffer.from(single[key].data.buffer), Buffer.from(plain[key].data.buffer)), `${key}, ${isa} ${threads} threads`).toBe(0);
        }
      }
    }
  });

  it("gives bit-identical forwards on 1 and 3 threads", async () => {
    const p = problem(CASES[2]!, 9);
    const one = await withThreads(1).forward(p.q, p.k, p.v, p);
    const three = await withThreads(3).forward(p.q, p.k, p.v, p);
    expect(Buffer.compare(Buffer.from(one.out.data.buffer), Buffer.from(three.out.data.buffer))).toBe(0);
    expect(Buffer.compare(Buffer.from(one.logSumExp.data.buffer), Buffer.from(three.logSumExp.data.buffer))).toBe(0);
  });

  it("rejects documents that do not fit, naming the values", async () => {
    const fused = withThreads(1);
    const q = new Tensor("float32", [2, 3, 1, 4]);
    const k = new Tensor("float32", [2, 5, 1, 4]);
    const key = Int32Array.from([0, 0, 1, 1, 1, 0, 1, 1, 2, 2]);
    const query = Int32Array.from([1, 1, 1, 1, 2, 2]);
    const attempt = (documents: AttentionDocuments) => fused.forward(q, k, k, { causal: true, documents });
    await expect(attempt({ query, key })).resolves.toBeDefined();
    await expect(attempt({ query: query.subarray(1), key })).rejects.toThrow(FusedAttentionError);
    // attentionDims (@ulysses/kernels) words these; we check the call, the offending values and the error class.
    await expect(attempt({ query: query.subarray(1), key })).rejects.toThrow(/^FusedAttention\.forward: documents\.query .*2 \* 3 = 6 ids, got 5/);
    await expect(attempt({ query, key: Int32Array.from([0, 0, 1, 1, 1, 0, 1, 3, 2, 2]) })).rejects.toThrow(/^FusedAttention\.forward: documents\.key .*row 1/);
    await expect(attempt({ query: Array.from(query) as unknown as Int32Array, key })).rejects.toThrow(
      /^FusedAttention\.forward: documents\.query must be an Int32Array/,
    );
    const g = fused.backward(q, k, k, q, q, new Tensor("float32", [2, 1, 3]), { causal: true, documents: { query, key: key.subarray(2) } });
    await expect(g).rejects.toThrow(/^FusedAttention\.backward: documents\.key .*2 \* 5 = 10 ids, got 8$/);
  });

  it("the custom op itself checks the document inputs' shapes and order (its failed runs' log lines kept out of the suite's output)", () => {
    // In a child process: ONNX Runtime logs each failed run on stderr from native code, which only a child's stderr captures.
    const run = spawnSync(process.execPath, ["--conditions=@ulysses/source", "--import", "tsx", OP_CHECKS], {
      encoding: "utf8",
      env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" },
      timeout: 60_000,
    });
    const context = `exit ${run.status}\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`;
    expect(run.status, context).toBe(0);
    const results = run.stdout
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as { ok?: true; error?: string });
    expect(results, context).toHaveLength(3);
    expect(results[0]).toEqual({ ok: true });
    expect(results[1]!.error).toMatch(/q_documents must never decrease along a batch row, but row 1 has 2 at 1 and 1 at 2/);
    expect(results[2]!.error).toMatch(/q_documents \[3, 2\] must be \[2, 3\] and k_documents \[2, 3\] must be \[2, 3\]/);
    // ONNX Runtime's own log of the two failures: captured here, and nothing else on stderr
    const logged = run.stderr.split("\n").filter((line) => line.trim() !== "");
    expect(logged, context).toHaveLength(2);
    expect(logged[0]).toMatch(/\[E:onnxruntime:.*FlashAttention: q_documents must never decrease/);
    expect(logged[1]).toMatch(/\[E:onnxruntime:.*FlashAttention: q_documents \[3, 2\] must be \[2, 3\]/);
  }, 90_000);
});
