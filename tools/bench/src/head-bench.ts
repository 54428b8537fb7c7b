/**
 * Benchmark of the tied LM head and its loss, tile by tile, as a training
 * step runs them (one rank, FusedOps on one thread), in two versions timed
 * alternately in one process:
 *
 * - before: the head's weight as a transposed copy of the embedding
 *   [hidden, vocab] made each step, logits = h W, cross-entropy's forward
 *   and backward as ONNX Runtime graphs (the gradient a second [tile, vocab]
 *   buffer), the argmax in JavaScript, dh = dLogits W^T;
 * - after (today's Gpt.lmHead and tiled loss): logits = h E^T straight from
 *   the embedding E [vocab, hidden] (Gemm with transB), the native
 *   cross-entropy writing the gradient over the logits, dh = dLogits E.
 *
 * Both add the weight gradient with linearWeightGradientInto. Prints each
 * pair's seconds per 8192 rows and its after / before ratio, and checks that
 * the two give the same loss and dh (within float32 rounding). Never part of
 * `test`. `--help` lists the flags.
 */
import { seededRandom } from "@ulysses/kernels/testing";
import { createRankKernels } from "@ulysses/native-ops";
import { median } from "@ulysses/measure";
import { permute, Tensor } from "@ulysses/tensors";
import { parseFlags, readCommandLine, UsageError } from "./cli-flags.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

const HELP = `Usage: pnpm bench:head [--vocab 151936] [--hidden 1024] [--rows 2048] [--tile 256] [--pairs 3] [--memory-arena]
  --vocab         vocabulary (default 151936, Qwen3's)
  --hidden        hidden size (default 1024)
  --rows          rows per timed pass (default 2048); times are scaled to 8192 rows
  --tile          rows per loss tile (default 256, the trainer's auto tile at this vocabulary)
  --pairs         before/after pairs, alternated (default 3)
  --memory-arena  run the kernels as --memory-arena does (ONNX Runtime arenas, an output pool)`;

interface Flags {
  vocab: number;
  hidden: number;
  rows: number;
  tile: number;
  pairs: number;
  memoryArena: boolean;
}

function readFlags(argv: readonly string[]): Flags | null {
  const values = parseFlags("bench:head", argv, {
    vocab: { type: "string", default: "151936" },
    hidden: { type: "string", default: "1024" },
    rows: { type: "string", default: "2048" },
    tile: { type: "string", default: "256" },
    pairs: { type: "string", default: "3" },
    "memory-arena": { type: "boolean", default: false },
  });
  if (values === null) return null;
  const positive = (name: string, text: string): number => {
    const n = Number(text);
    if (!Number.isSafeInteger(n) || n < 1) throw new UsageError(`bench:head: --${name} must be a positive integer, got '${text}'`);
    return n;
  };
  const flags = {
    vocab: positive("vocab", values.vocab),
    hidden: positive("hidden", values.hidden),
    rows: positive("rows", values.rows),
    tile: positive("tile", values.tile),
    pairs: positive("pairs", values.pairs),
    memoryArena: values["memory-arena"],
  };
  if (flags.rows % flags.tile !== 0) throw new UsageError(`bench:head: --rows (${flags.rows}) must be a multiple of --tile (${flags.tile})`);
  return flags;
}

const flags = readCommandLine(HELP, process.argv.slice(2), readFlags);
const { vocab, hidden, rows, tile } = flags;
const { ops, description } = await createRankKernels(1, "auto", flags.memoryArena);
if (ops.crossEntropyInPlace === undefined || ops.linearWeightGradientInto === undefined)
  throw new Error("bench:head needs the native ops (the addon built, an AVX2 or AVX-512 processor)");

const uniform = seededRandom(1);
const random = () => uniform() * 2 - 1;
const embedding = new Tensor(
  "float32",
  [vocab, hidden],
  Float32Array.from({ length: vocab * hidden }, () => random() * 0.05),
);
const gradient = new Tensor("float32", [vocab, hidden]);
const h = new Tensor(
  "float32",
  [rows, hidden],
  Float32Array.from({ length: rows * hidden }, () => random()),
);
const labels = new Tensor(
  "int32",
  [rows],
  Int32Array.from({ length: rows }, (_, r) => (r * 7919) % vocab),
);
const scale = 1 / rows;

/** Rows predicted right by the scans of `before` (kept so the scan is not dead code). */
let predicted = 0;

interface Pass {
  seconds: number;
  lossSum: number;
  dh: Float32Array;
}

type F32 = Tensor<"float32">;
type I32 = Tensor<"int32">;

/** One version's pass over the rows: `tile` gets each tile's h and labels and returns its loss sum and dh. */
async function pass(prepare: () => void, tileStep: (hTile: F32, labelsTile: I32) => Promise<{ lossSum: number; dh: F32 }>): Promise<Pass> {
  const start = performance.now();
  prepare();
  const dh = new Float32Array(rows * hidden);
  let lossSum = 0;
  for (let from = 0; from < rows; from += tile) {
    const hTile = new Tensor("float32", [tile, hidden], h.data.subarray(from * hidden, (from + tile) * hidden));
    const labelsTile = new Tensor("int32", [tile], labels.data.subarray(from, from + tile));
    const result = await tileStep(hTile, labelsTile);
    lossSum += result.lossSum;
    dh.set(result.dh.data, from * hidden);
    ops.release?.(result.dh);
  }
  return { seconds: (performance.now() - start) / 1000, lossSum, dh };
}

function before(): Promise<Pass> {
  let w = embedding;
  return pass(
    () => {
      w = permute(embedding, [1, 0]);
    },
    async (hTile, labelsTile) => {
      const logits = await ops.linearForward(hTile, w);
      const { lossSum } = await ops.crossEntropyForward(logits, labelsTile);
      // the prediction, scanned as @ulysses/training's countCorrect did (its result is not needed here)
      for (let r = 0; r < tile; r++) {
        let best = 0;
        for (let v = 1; v < vocab; v++) if (logits.data[r * vocab + v]! > logits.data[r * vocab + best]!) best = v;
        predicted += best === labelsTile.data[r] ? 1 : 0;
      }
      const dLogits = await ops.crossEntropyBackward(logits, labelsTile, scale);
      await ops.linearWeightGradientInto!(dLogits, hTile, gradient);
      const dh = await ops.linearInputGradient(w, dLogits);
      ops.release?.(logits, dLogits);
      return { lossSum, dh };
    },
  );
}

function after(): Promise<Pass> {
  return pass(
    () => {},
    async (hTile, labelsTile) => {
      const logits = await ops.linearInputGradient(embedding, hTile);
      const { lossSum } = await ops.crossEntropyInPlace!(logits, labelsTile, scale);
      await ops.linearWeightGradientInto!(logits, hTile, gradient);
      const dh = await ops.linearForward(logits, embedding);
      ops.release?.(logits);
      return { lossSum, dh };
    },
  );
}

console.log(`bench:head: vocab ${vocab}, hidden ${hidden}, ${rows} rows in tiles of ${tile}, ${description}${flags.memoryArena ? ", --memory-arena" : ""}`);
// one untimed pass of each: sessions created, pools filled
const warmBefore = await before();
const warmAfter = await after();
let worst = 0;
for (let i = 0; i < warmBefore.dh.length; i++) worst = Math.max(worst, Math.abs(warmBefore.dh[i]! - warmAfter.dh[i]!) / (1e-3 + Math.abs(warmBefore.dh[i]!)));
const lossGap = Math.abs(warmBefore.lossSum - warmAfter.lossSum) / Math.abs(warmBefore.lossSum);
console.log(
  `check: loss ${warmBefore.lossSum.toFixed(4)} vs ${warmAfter.lossSum.toFixed(4)} (relative gap ${lossGap.toExponential(1)}), dh worst relative gap ${worst.toExponential(1)}`,
);
if (lossGap > 1e-5 || worst > 1e-3) throw new Error("bench:head: the two versions disagree");
const perRows = 8192 / rows;
const ratios: number[] = [];
console.log("pair  before (s / 8192 rows)  after (s / 8192 rows)  after / before");
for (let pair = 1; pair <= flags.pairs; pair++) {
  const b = (await before()).seconds * perRows;
  const a = (await after()).seconds * perRows;
  ratios.push(a / b);
  console.log(`${String(pair).padStart(4)}  ${b.toFixed(2).padStart(22)}  ${a.toFixed(2).padStart(21)}  ${(a / b).toFixed(3).padStart(14)}`);
}
console.log(`median after / before: ${median(ratios).toFixed(3)} (${predicted} rows predicted right along the way)`);
process.exit(0);
