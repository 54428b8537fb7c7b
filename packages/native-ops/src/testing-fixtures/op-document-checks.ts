/**
 * Fixture for documents.test.ts: runs the FlashAttention custom op directly
 * (a native Session, no JS checks in front) with document inputs that are
 * valid, out of order, and of the wrong shape, and prints one JSON line per
 * run ({ ok } or { error }) to stdout. Its own process, because ONNX Runtime
 * logs each failed run on stderr from native code; the test reads that
 * output instead of leaving it in the suite's.
 */
import { attentionModel } from "../index.js";
import { loadNative } from "../native.js";

const native = loadNative();
if (!native.ok) throw native.error;
const runtime = new native.binding.Runtime({ threads: 1 });
const session = new native.binding.Session(runtime, attentionModel("forward", false, 0.5, true));
const q = new Float32Array(2 * 3 * 4);
const out = [new Float32Array(2 * 3 * 4), new Float32Array(2 * 3)];
const go = (query: number[], key: number[], queryDims: number[]) =>
  session.run(
    ["q", "k", "v", "q_documents", "k_documents"],
    [q, q, q, Int32Array.from(query), Int32Array.from(key)],
    [[2, 3, 1, 4], [2, 3, 1, 4], [2, 3, 1, 4], queryDims, [2, 3]],
    ["out", "lse"],
    out,
    [
      [2, 3, 1, 4],
      [2, 1, 3],
    ],
  );
const cases: [number[], number[], number[]][] = [
  [
    [0, 1, 1, 0, 0, 0],
    [0, 1, 1, 0, 0, 0],
    [2, 3],
  ],
  [
    [0, 1, 1, 0, 2, 1],
    [0, 1, 1, 0, 0, 0],
    [2, 3],
  ],
  [
    [0, 1, 1, 0, 0, 0],
    [0, 1, 1, 0, 0, 0],
    [3, 2],
  ],
];
try {
  for (const [query, key, dims] of cases) {
    try {
      await go(query, key, dims);
      console.log(JSON.stringify({ ok: true }));
    } catch (error) {
      console.log(JSON.stringify({ error: (error as Error).message }));
    }
  }
} finally {
  session.release();
  runtime.release();
}
