/**
 * Benchmark of the block's ops (never part of `test`): OrtOps forward and
 * backward per op at one block-sized shape (process CPU time, median), against the float64 ReferenceOps
 * measured in the same run, with the backward/forward ratio and the effective
 * bandwidth (bytes the op must read and write / time) or GFLOP/s for linear.
 * Prints a table and writes bench-results/kernels-ops.json at the repository
 * root. Uses only the public API of @ulysses/kernels.
 *
 *   npx pnpm@12.4.2 --filter @ulysses/tools bench:ops -- [--rows 2048] [--hidden 256] [--threads 1] [--iters 5] [--no-reference]
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { OrtOps, ReferenceOps, SessionCache, type TrainingOps } from "@ulysses/kernels";
import { randomTensor, seededRandom } from "@ulysses/kernels/testing";
import { median } from "@ulysses/measure";
import { Tensor } from "@ulysses/tensors";
import { parseFlags, positiveInteger, readCommandLine } from "./cli-flags.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

const OPS_HELP = `Usage: pnpm bench:ops [flags]

OrtOps forward and backward per op at one block-sized shape (median process CPU
ms) against the float64 ReferenceOps; writes bench-results/kernels-ops.json.

  --rows N          rows of the activations (default 2048)
  --hidden N        hidden size (default 256)
  --threads N       ONNX Runtime threads (default 1)
  --iters N         timed runs per op, median reported (default 5)
  --no-reference    skip the float64 reference
  --help, -h        this text
`;

const FLAGS = {
  rows: { type: "string" },
  hidden: { type: "string" },
  threads: { type: "string" },
  iters: { type: "string" },
  "no-reference": { type: "boolean" },
} as const;

const flags = readCommandLine(OPS_HELP, process.argv.slice(2), (argv) => {
  const values = parseFlags("bench:ops", argv, FLAGS);
  if (values === null) return null;
  const count = (name: "rows" | "hidden" | "threads" | "iters", fallback: number) =>
    values[name] === undefined ? fallback : positiveInteger(`--${name}`, values[name]);
  return {
    rows: count("rows", 2048),
    hidden: count("hidden", 256),
    threads: count("threads", 1),
    iters: count("iters", 5),
    withReference: values["no-reference"] !== true,
  };
});
const { rows, hidden, threads, iters, withReference } = flags;
const heads = 8,
  headDim = hidden / heads,
  vocab = 4096,
  ffn = 4 * hidden;
const random = seededRandom(1);
const r = (shape: number[]) => randomTensor(shape, random);

interface Case {
  op: string;
  /** Bytes forward must read + write (float32), or flops for linear. */
  fwdBytes?: number;
  fwdFlops?: number;
  forward: (ops: TrainingOps) => Promise<unknown>;
  backward: (ops: TrainingOps) => Promise<unknown>;
}

const x = r([rows, hidden]),
  w = r([hidden, ffn]),
  b = r([ffn]),
  dyWide = r([rows, ffn]),
  gamma = r([hidden]),
  beta = r([hidden]),
  dy = r([rows, hidden]);
const wide = r([rows, ffn]),
  up = r([rows, ffn]);
const xr = r([1, rows, heads, headDim]);
const ids = Tensor.from(
  "int32",
  [rows],
  Array.from({ length: rows }, () => Math.floor(random() * vocab)),
);
const table = r([vocab, hidden]);
const logits = r([rows, vocab]);
const labels = Tensor.from(
  "int32",
  [rows],
  Array.from({ length: rows }, (_, i) => (i % 7 === 0 ? -100 : Math.floor(random() * vocab))),
);
const ln = await new ReferenceOps().layerNormForward(x, gamma, beta, 1e-5);
const rms = await new ReferenceOps().rmsNormForward(x, gamma, 1e-6);
const f = 4; // bytes per float32

const CASES: Case[] = [
  {
    op: `linear ${rows}x${hidden}->${ffn}`,
    fwdFlops: 2 * rows * hidden * ffn,
    forward: (o) => o.linearForward(x, w, b),
    backward: (o) => o.linearBackward(x, w, dyWide, true),
  },
  {
    op: `layerNorm ${rows}x${hidden}`,
    fwdBytes: 2 * rows * hidden * f,
    forward: (o) => o.layerNormForward(x, gamma, beta, 1e-5),
    backward: (o) => o.layerNormBackward(x, gamma, ln, dy),
  },
  {
    op: `rmsNorm ${rows}x${hidden}`,
    fwdBytes: 2 * rows * hidden * f,
    forward: (o) => o.rmsNormForward(x, gamma, 1e-6),
    backward: (o) => o.rmsNormBackward(x, gamma, rms.rstd, dy),
  },
  { op: `gelu ${rows}x${ffn}`, fwdBytes: 2 * rows * ffn * f, forward: (o) => o.geluForward(wide), backward: (o) => o.geluBackward(wide, dyWide) },
  { op: `swiglu ${rows}x${ffn}`, fwdBytes: 3 * rows * ffn * f, forward: (o) => o.swigluForward(wide, up), backward: (o) => o.swigluBackward(wide, up, dyWide) },
  {
    op: `rope 1x${rows}x${heads}x${headDim}`,
    fwdBytes: 2 * rows * hidden * f,
    forward: (o) => o.ropeForward(xr, 100),
    backward: (o) => o.ropeBackward(xr, 100),
  },
  {
    op: `embedding ${rows} of ${vocab}x${hidden}`,
    fwdBytes: 2 * rows * hidden * f,
    forward: (o) => o.embeddingForward(ids, table),
    backward: (o) => o.embeddingBackward(ids, dy, vocab),
  },
  {
    op: `crossEntropy ${rows}x${vocab}`,
    fwdBytes: rows * vocab * f,
    forward: (o) => o.crossEntropyForward(logits, labels),
    backward: (o) => o.crossEntropyBackward(logits, labels, 1 / rows),
  },
];

/** Process CPU milliseconds (user + system): steadier than wall time on a shared machine with one ORT thread. */
function cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e3;
}

/** Median process CPU ms of `n` calls of `fn` after one untimed call. */
async function medianCpuMs(fn: () => Promise<unknown>, n: number): Promise<number> {
  await fn();
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = cpuMs();
    await fn();
    times.push(cpuMs() - t0);
  }
  return median(times);
}

const cache = new SessionCache({ intraOpThreads: threads });
const ort = new OrtOps(cache);
const reference = new ReferenceOps();
// Warm up every session twice first: the first runs in a fresh process are several times slower (heap growth).
for (let round = 0; round < 2; round++)
  for (const c of CASES) {
    await c.forward(ort);
    await c.backward(ort);
  }
const results = [];
for (const c of CASES) {
  const fwd = await medianCpuMs(() => c.forward(ort), iters);
  const bwd = await medianCpuMs(() => c.backward(ort), iters);
  const refFwd = withReference ? await medianCpuMs(() => c.forward(reference), 1) : NaN;
  const refBwd = withReference ? await medianCpuMs(() => c.backward(reference), 1) : NaN;
  const rate = c.fwdFlops ? `${(c.fwdFlops / fwd / 1e6).toFixed(1)} GFLOP/s` : `${(c.fwdBytes! / fwd / 1e6).toFixed(2)} GB/s`;
  results.push({
    op: c.op,
    fwdMs: fwd,
    bwdMs: bwd,
    bwdOverFwd: bwd / fwd,
    forwardRate: rate,
    referenceFwdMs: refFwd,
    referenceBwdMs: refBwd,
    referenceOverOrtBwd: refBwd / bwd,
  });
}
await cache.release();

const pad = (s: string, n: number) => s.padStart(n);
console.log(`OrtOps, ${threads} ONNX Runtime thread(s), median process CPU ms of ${iters}; reference = float64 ReferenceOps (one run)`);
console.log(
  `${"op".padEnd(34)}${pad("fwd ms", 9)}${pad("bwd ms", 9)}${pad("bwd/fwd", 9)}${pad("fwd rate", 17)}${pad("ref fwd", 9)}${pad("ref bwd", 9)}${pad("ref/ort bwd", 13)}`,
);
for (const e of results) {
  console.log(
    `${e.op.padEnd(34)}${pad(e.fwdMs.toFixed(2), 9)}${pad(e.bwdMs.toFixed(2), 9)}${pad(e.bwdOverFwd.toFixed(2), 9)}${pad(e.forwardRate, 17)}` +
      `${pad(e.referenceFwdMs.toFixed(1), 9)}${pad(e.referenceBwdMs.toFixed(1), 9)}${pad(e.referenceOverOrtBwd.toFixed(1), 13)}`,
  );
}
const outDir = fileURLToPath(new URL("../../../bench-results/", import.meta.url));
mkdirSync(outDir, { recursive: true });
writeFileSync(`${outDir}kernels-ops.json`, JSON.stringify({ rows, hidden, ffn, vocab, threads, iters, results }, null, 2));
console.log(`wrote ${outDir}kernels-ops.json`);
