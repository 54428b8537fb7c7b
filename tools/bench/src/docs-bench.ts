/**
 * `pnpm bench:docs`: what document masking (AttentionOptions.documents) saves
 * in the fused attention kernel. One packed sequence of N tokens holding D
 * documents, fused forward + backward, three ways measured in the same run:
 *
 *   (a) the packed sequence with documents: the kernel skips the key tiles
 *       outside each query tile's documents;
 *   (b) the same N tokens as one causal (or full) sequence, no documents;
 *   (c) each document as its own call of N / D tokens, one after another.
 *
 * (b)/(a) is the saving (D for full attention, about D for causal; target >= 5
 * at the defaults), (a)/(c) the price of packing over separate calls (target
 * <= 1.5). Rounds run (a), (b), (c) in turn after one warm-up round, and each
 * reports the median (@ulysses/measure) of its rounds' wall times, and of
 * their process CPU times (user + system, all threads: the work done, which a
 * shared, busy machine disturbs less than the wall time; the ratios are given
 * for both). The bench also checks that (a) and (c) agree. Prints a table and writes
 * bench-results/docs.json. Never part of `test`.
 *
 *   pnpm bench:docs [--seq 8192] [--documents 8] [--heads 8] [--kv-heads H] [--head-dim 64]
 *                   [--threads N] [--repeats 5] [--full]
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { FusedAttention, fusedAttentionStatus } from "@ulysses/native-ops";
import type { AttentionOptions } from "@ulysses/kernels";
import { maxRelativeError, randomTensor, seededRandom } from "@ulysses/kernels/testing";
import { median } from "@ulysses/measure";
import { Tensor } from "@ulysses/tensors";
import { parseFlags, positiveInteger, readCommandLine, UsageError } from "./cli-flags.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const SAVING_TARGET = 5;
const PACKING_TARGET = 1.5;

const DOCS_HELP = `Usage: pnpm bench:docs [flags]

Fused attention forward + backward on one packed sequence of documents:
(a) with document masking, (b) the same tokens without documents, (c) each
document as its own call. Prints the ratios (b)/(a) (target >= ${SAVING_TARGET}) and
(a)/(c) (target <= ${PACKING_TARGET}); writes bench-results/docs.json.

  --seq N          tokens of the packed sequence (default 8192)
  --documents N    documents in it, of equal length give or take one (default 8)
  --heads N        query heads (default 8)
  --kv-heads N     kv heads, dividing --heads (default: --heads)
  --head-dim N     head dimension (default 64)
  --threads N      threads of the CPU kernel (default: all cores)
  --repeats N      timed rounds, after one warm-up round (default 5)
  --full           full (non-causal) attention instead of causal
  --help, -h       this text
`;

const FLAGS = {
  seq: { type: "string" },
  documents: { type: "string" },
  heads: { type: "string" },
  "kv-heads": { type: "string" },
  "head-dim": { type: "string" },
  threads: { type: "string" },
  repeats: { type: "string" },
  full: { type: "boolean" },
} as const;

interface Args {
  seq: number;
  documents: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  threads: number;
  repeats: number;
  causal: boolean;
}

function parseDocsArgs(argv: readonly string[]): Args | null {
  const values = parseFlags("bench:docs", argv, FLAGS);
  if (values === null) return null;
  const read = (flag: keyof typeof FLAGS, fallback: number): number => {
    const text = values[flag];
    return typeof text === "string" ? positiveInteger(`--${flag}`, text) : fallback;
  };
  const seq = read("seq", 8192);
  const documents = read("documents", 8);
  const heads = read("heads", 8);
  const kvHeads = read("kv-heads", heads);
  if (documents > seq) throw new UsageError(`bench:docs: --documents (${documents}) must be at most --seq (${seq})`);
  if (heads % kvHeads !== 0) throw new UsageError(`bench:docs: --kv-heads (${kvHeads}) must divide --heads (${heads})`);
  return {
    seq,
    documents,
    heads,
    kvHeads,
    headDim: read("head-dim", 64),
    threads: read("threads", os.availableParallelism()),
    repeats: read("repeats", 5),
    causal: values.full !== true,
  };
}

/** Document lengths: seq split into `count` parts, the first seq % count one longer. */
function documentLengths(seq: number, count: number): number[] {
  return Array.from({ length: count }, (_, n) => Math.floor(seq / count) + (n < seq % count ? 1 : 0));
}

/** Rows [lo, hi) of t ([1, seq, heads, headDim]) as their own [1, hi - lo, heads, headDim] tensor. */
function rows(t: Tensor<"float32">, lo: number, hi: number): Tensor<"float32"> {
  const row = t.shape[2]! * t.shape[3]!;
  return new Tensor("float32", [1, hi - lo, t.shape[2]!, t.shape[3]!], t.data.slice(lo * row, hi * row));
}

async function forwardBackward(
  attention: FusedAttention,
  q: Tensor<"float32">,
  k: Tensor<"float32">,
  v: Tensor<"float32">,
  dOut: Tensor<"float32">,
  options: AttentionOptions,
) {
  const { out, logSumExp } = await attention.forward(q, k, v, options);
  const grads = await attention.backward(q, k, v, out, dOut, logSumExp, options);
  return { out, logSumExp, ...grads };
}

/** Wall and process CPU seconds of one run. */
async function seconds(run: () => Promise<unknown>): Promise<{ wall: number; cpu: number }> {
  const cpu = process.cpuUsage();
  const start = performance.now();
  await run();
  const used = process.cpuUsage(cpu);
  return { wall: (performance.now() - start) / 1000, cpu: (used.user + used.system) / 1e6 };
}

function row(cells: (string | number)[], widths: number[]): string {
  return cells.map((c, i) => (i === 0 ? String(c).padEnd(widths[i]!) : String(c).padStart(widths[i]!))).join("  ");
}

async function main(): Promise<void> {
  const args = readCommandLine(DOCS_HELP, process.argv.slice(2), parseDocsArgs);
  const status = fusedAttentionStatus();
  if (!status.available) throw new Error(`bench:docs needs the fused-attention addon: ${status.reason}`);
  const { seq, heads, kvHeads, headDim, causal } = args;
  const lengths = documentLengths(seq, args.documents);
  const starts = lengths.map((_, n) => lengths.slice(0, n).reduce((a, b) => a + b, 0));
  const ids = new Int32Array(seq);
  starts.forEach((start, n) => ids.fill(n, start, start + lengths[n]!));
  const documents = { query: ids, key: ids };

  const random = seededRandom(1);
  const q = randomTensor([1, seq, heads, headDim], random); // [batch, seq, heads, headDim]
  const k = randomTensor([1, seq, kvHeads, headDim], random);
  const v = randomTensor([1, seq, kvHeads, headDim], random);
  const dOut = randomTensor([1, seq, heads, headDim], random);
  const parts = starts.map((start, n) => ({
    start,
    q: rows(q, start, start + lengths[n]!),
    k: rows(k, start, start + lengths[n]!),
    v: rows(v, start, start + lengths[n]!),
    dOut: rows(dOut, start, start + lengths[n]!),
  }));

  const loadBefore = os.loadavg();
  const started = new Date().toISOString();
  console.error(
    `docs bench: seq ${seq} = ${args.documents} documents of ${[...new Set(lengths)].join("/")}, ${causal ? "causal" : "full"}, heads ${heads}/${kvHeads}, head dim ${headDim}, ` +
      `${args.threads} thread(s), ${status.info.cpuIsa} kernels, ${args.repeats} rounds; load ${loadBefore.map((l) => l.toFixed(2)).join(" ")}`,
  );
  const attention = new FusedAttention({ threads: args.threads });
  const cases = {
    packed: () => forwardBackward(attention, q, k, v, dOut, { causal, documents }),
    whole: () => forwardBackward(attention, q, k, v, dOut, { causal }),
    separate: async () => {
      for (const p of parts) await forwardBackward(attention, p.q, p.k, p.v, p.dOut, { causal });
    },
  };
  type Name = keyof typeof cases;
  const times: Record<Name, number[]> = { packed: [], whole: [], separate: [] };
  const cpuTimes: Record<Name, number[]> = { packed: [], whole: [], separate: [] };
  let agreement: number;
  try {
    // Warm-up round (sessions, pages), and the check that (a) equals (c).
    const packed = await cases.packed();
    await cases.whole();
    const out = new Tensor("float32", q.shape);
    for (const p of parts) out.data.set((await attention.forward(p.q, p.k, p.v, { causal })).out.data, p.start * heads * headDim);
    agreement = maxRelativeError(packed.out, out);
    for (let round = 0; round < args.repeats; round++) {
      for (const name of Object.keys(cases) as Name[]) {
        const s = await seconds(cases[name]);
        times[name].push(s.wall);
        cpuTimes[name].push(s.cpu);
        console.error(`  round ${round + 1}: ${name} ${s.wall.toFixed(3)} s (CPU ${s.cpu.toFixed(3)} s)`);
      }
    }
  } finally {
    attention.release();
  }
  const loadAfter = os.loadavg();

  const a = median(times.packed);
  const b = median(times.whole);
  const c = median(times.separate);
  const saving = b / a;
  const packing = a / c;
  const cpu = { packed: median(cpuTimes.packed), whole: median(cpuTimes.whole), separate: median(cpuTimes.separate) };
  const cpuSaving = cpu.whole / cpu.packed;
  const cpuPacking = cpu.packed / cpu.separate;
  const widths = [46, 10, 10, 36];
  const mask = causal ? "causal" : "full";
  console.log(
    `\nFused attention forward + backward, seq ${seq}, ${args.documents} documents, ${mask}, heads ${heads}/${kvHeads}, head dim ${headDim}, ${args.threads} thread(s) (${status.info.cpuIsa}). Medians of ${args.repeats} rounds.`,
  );
  console.log(row(["case", "wall s", "CPU s", "rounds, wall s"], widths));
  const show = (name: string, wall: number, cpuSeconds: number, runs: number[]) =>
    console.log(row([name, wall.toFixed(3), cpuSeconds.toFixed(3), runs.map((t) => t.toFixed(3)).join(" ")], widths));
  show(`(a) ${seq} tokens with documents`, a, cpu.packed, times.packed);
  show(`(b) ${seq} tokens ${mask}, no documents`, b, cpu.whole, times.whole);
  show(`(c) ${args.documents} separate calls of ${[...new Set(lengths)].join("/")}`, c, cpu.separate, times.separate);
  console.log(`(b)/(a) = ${saving.toFixed(2)} wall, ${cpuSaving.toFixed(2)} CPU  (target >= ${SAVING_TARGET}: ${saving >= SAVING_TARGET ? "met" : "missed"})`);
  console.log(
    `(a)/(c) = ${packing.toFixed(2)} wall, ${cpuPacking.toFixed(2)} CPU  (target <= ${PACKING_TARGET}: ${packing <= PACKING_TARGET ? "met" : "missed"})`,
  );
  console.log(`(a) and (c) agree: max relative error of out ${agreement.toExponential(2)}`);
  console.log(
    `load average (1/5/15 min): before ${loadBefore.map((l) => l.toFixed(2)).join(" ")}, after ${loadAfter.map((l) => l.toFixed(2)).join(" ")}; ${os.availableParallelism()} cores`,
  );

  const file = path.join(REPO_ROOT, "bench-results", "docs.json");
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const report = {
    started,
    cores: os.availableParallelism(),
    cpu: os.cpus()[0]?.model,
    cpuIsa: status.info.cpuIsa,
    loadBefore,
    loadAfter,
    timing: "wall and process CPU seconds of one forward + backward, medians of the rounds (after one warm-up round); targets judged on wall time",
    ...args,
    documentLengths: lengths,
    seconds: { packed: a, whole: b, separate: c },
    cpuSeconds: cpu,
    rounds: times,
    cpuRounds: cpuTimes,
    ratios: { wholeOverPacked: saving, packedOverSeparate: packing },
    cpuRatios: { wholeOverPacked: cpuSaving, packedOverSeparate: cpuPacking },
    targets: { wholeOverPacked: SAVING_TARGET, packedOverSeparate: PACKING_TARGET },
    agreementMaxRelativeError: agreement,
  };
  fs.writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
  console.log(`wrote ${path.relative(process.cwd(), file)}`);
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
