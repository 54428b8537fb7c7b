/**
 * `pnpm bench:block`: one TransformerBlock forward + backward per rank on the
 * threads backend with ONNX Runtime kernels, Ulysses against the
 * all-gather-KV baseline, for P ranks and sequence lengths N (strong
 * scaling), plus weak-scaling rows (N/P fixed, P = 1, 2, 4). Prints two tables
 * and writes bench-results/block.json. Never part of `test`.
 *
 * Flags: --ranks 2,4  --min-seq 2048  --max-seq 8192  --weak-per-rank 2048
 *        --weak-ranks 1,2,4  --iters 3  --hidden 256  --heads 8  --batch 1  --no-weak
 *        --checkpoint-seq N (default: max-seq)  --no-checkpoint
 * Checkpoint rows: Ulysses with activation checkpointing at one N per P (saved
 * bytes per rank with and without it; the recompute adds a forward's traffic).
 * The full sweep of the brief is `--max-seq 32768` (about 10+ minutes on 2 cores).
 * `--help` lists the flags; a bad flag or value exits 2 naming it.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { availableParallelism, cpus } from "node:os";
import { fileURLToPath } from "node:url";
import { launch } from "@ulysses/collectives";
import type { BlockConfig } from "@ulysses/block";
import type { SequenceParallelKind } from "@ulysses/parallel";
import type { BlockRunArgs, BlockRunResult } from "./block-rank.js";
import { parseFlags, positiveInteger, positiveIntegers, readCommandLine } from "./cli-flags.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

interface Flags {
  ranks: number[];
  minSeq: number;
  maxSeq: number;
  weakPerRank: number;
  weakRanks: number[];
  iters: number;
  hidden: number;
  heads: number;
  batch: number;
  weak: boolean;
  /** N of the activation-checkpointing rows (0: none). */
  checkpointSeq: number;
}

const BLOCK_HELP = `Usage: pnpm bench:block [flags]

One TransformerBlock forward + backward per rank (threads backend, ONNX Runtime
kernels), Ulysses against the all-gather-KV baseline; writes bench-results/block.json.

  --ranks LIST            SP degrees (default 2,4)
  --min-seq N --max-seq N sequence lengths, doubling (default 2048 to 8192; the full sweep: --max-seq 32768)
  --weak-per-rank N       tokens per rank of the weak-scaling rows (default 2048)
  --weak-ranks LIST       degrees of the weak-scaling rows (default 1,2,4)
  --no-weak               no weak-scaling rows
  --iters N               timed steps per row, median reported (default 3)
  --hidden N --heads N    block size (default 256, 8)
  --batch N               sequences per step (default 1)
  --checkpoint-seq N      N of the activation-checkpointing rows (default: max-seq)
  --no-checkpoint         no activation-checkpointing rows
  --help, -h              this text
`;

const FLAGS = {
  ranks: { type: "string" },
  "min-seq": { type: "string" },
  "max-seq": { type: "string" },
  "weak-per-rank": { type: "string" },
  "weak-ranks": { type: "string" },
  iters: { type: "string" },
  hidden: { type: "string" },
  heads: { type: "string" },
  batch: { type: "string" },
  "no-weak": { type: "boolean" },
  "checkpoint-seq": { type: "string" },
  "no-checkpoint": { type: "boolean" },
} as const;

function parseBlockFlags(argv: readonly string[]): Flags | null {
  const values = parseFlags("bench:block", argv, FLAGS);
  if (values === null) return null;
  const count = (flag: keyof typeof FLAGS, fallback: number) => {
    const text = values[flag];
    return typeof text === "string" ? positiveInteger(`--${flag}`, text) : fallback;
  };
  const maxSeq = count("max-seq", 8192);
  return {
    ranks: values.ranks === undefined ? [2, 4] : positiveIntegers("--ranks", values.ranks),
    minSeq: count("min-seq", 2048),
    maxSeq,
    weakPerRank: count("weak-per-rank", 2048),
    weakRanks: values["weak-ranks"] === undefined ? [1, 2, 4] : positiveIntegers("--weak-ranks", values["weak-ranks"]),
    iters: count("iters", 3),
    hidden: count("hidden", 256),
    heads: count("heads", 8),
    batch: count("batch", 1),
    weak: values["no-weak"] !== true,
    checkpointSeq: values["no-checkpoint"] === true ? 0 : count("checkpoint-seq", maxSeq),
  };
}

interface Row {
  ranks: number;
  seq: number;
  kind: SequenceParallelKind;
  checkpoint: boolean;
  stepMs: number;
  forwardMs: number;
  tokensPerSecond: number;
  attentionBytesPerRank: number;
  expectedAttentionBytes: number;
  gradBytesPerRank: number;
  attentionCommMs: number;
  gradCommMs: number;
  computeMs: number;
  savedBytesPerRank: number;
  /** Per rank (rank order): ms inside the local attention kernel and inside the other ops. */
  kernelAttentionMs: number[];
  kernelOpsMs: number[];
}

/** Bytes per rank of one forward + backward, from the README formulas (N divisible by P, MHA). */
function expectedBytes(kind: SequenceParallelKind, checkpoint: boolean, p: number, n: number, f: Flags): number {
  const headDim = f.hidden / f.heads;
  const passes = checkpoint ? 3 : 2; // the recompute repeats the forward's exchanges
  if (kind === "ulysses") return (passes * 4 * (p - 1) * (n / p) * f.heads * headDim * 4 * f.batch) / p;
  return 2 * (p - 1) * (n / p) * 2 * f.batch * f.heads * headDim * 4;
}

type Job = { seq: number; kind: SequenceParallelKind; checkpoint: boolean };
const keyOf = (p: number, j: Job) => `${p}/${j.seq}/${j.kind}${j.checkpoint ? "/checkpoint" : ""}`;

async function measure(p: number, jobs: Job[], f: Flags, results: Map<string, Row>): Promise<void> {
  const todo = [...new Map(jobs.map((j) => [keyOf(p, j), j])).entries()].filter(([key]) => !results.has(key)).map(([, j]) => j);
  if (todo.length === 0) return;
  const world = await launch<{ run(args: BlockRunArgs): Promise<BlockRunResult> }>({
    worldSize: p,
    entry: new URL("./block-rank.ts", import.meta.url),
    ortThreadsPerRank: Math.max(1, Math.floor(availableParallelism() / p)),
    timeoutMs: 600_000,
  });
  try {
    for (const job of todo) {
      const { seq, kind, checkpoint } = job;
      const config: BlockConfig & { attention: SequenceParallelKind } = { hidden: f.hidden, heads: f.heads, attention: kind, causal: true };
      const ranks = await world.all("run", { config, batch: f.batch, seq, iters: f.iters, checkpoint });
      const max = (pick: (r: BlockRunResult) => number) => Math.max(...ranks.map(pick));
      const mean = (pick: (r: BlockRunResult) => number) => ranks.reduce((a, r) => a + pick(r), 0) / ranks.length;
      const stepMs = max((r) => r.stepMs);
      const commMs = mean((r) => r.attentionCommMs + r.gradCommMs);
      const row: Row = {
        ranks: p,
        seq,
        kind,
        checkpoint,
        stepMs,
        forwardMs: max((r) => r.forwardMs),
        tokensPerSecond: (f.batch * seq) / (stepMs / 1000),
        attentionBytesPerRank: max((r) => r.attentionBytes),
        expectedAttentionBytes: expectedBytes(kind, checkpoint, p, seq, f),
        gradBytesPerRank: max((r) => r.gradBytes),
        attentionCommMs: mean((r) => r.attentionCommMs),
        gradCommMs: mean((r) => r.gradCommMs),
        computeMs: mean((r) => r.stepMs) - commMs,
        savedBytesPerRank: max((r) => r.savedBytes),
        kernelAttentionMs: ranks.map((r) => Math.round(r.kernelAttentionMs)),
        kernelOpsMs: ranks.map((r) => Math.round(r.kernelOpsMs)),
      };
      results.set(keyOf(p, job), row);
      console.error(
        `  P=${p} N=${seq} ${kind}${checkpoint ? " (checkpointing)" : ""}: ${stepMs.toFixed(0)} ms (per rank: attention kernel ${row.kernelAttentionMs.join("/")} ms, other ops ${row.kernelOpsMs.join("/")} ms)`,
      );
    }
  } finally {
    await world.shutdown();
  }
}

const mb = (bytes: number) => (bytes / 2 ** 20).toFixed(2);
const ms = (t: number) => t.toFixed(0);

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padStart(widths[i]!)).join(" | ")} |`;
  return [line(header), `|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`, ...rows.map(line)].join("\n");
}

async function main(): Promise<void> {
  const f = readCommandLine(BLOCK_HELP, process.argv.slice(2), parseBlockFlags);
  const seqs: number[] = [];
  for (let n = f.minSeq; n <= f.maxSeq; n *= 2) seqs.push(n);
  const results = new Map<string, Row>();
  const started = performance.now();
  const both = (seq: number): Job[] => [
    { seq, kind: "ulysses", checkpoint: false },
    { seq, kind: "allgather", checkpoint: false },
  ];
  for (const p of f.ranks) {
    const jobs = seqs.flatMap(both);
    if (f.checkpointSeq > 0) jobs.push(...both(f.checkpointSeq), { seq: f.checkpointSeq, kind: "ulysses", checkpoint: true });
    await measure(p, jobs, f, results);
  }
  if (f.weak) for (const p of f.weakRanks) await measure(p, both(f.weakPerRank * p), f, results);

  const get = (p: number, n: number, kind: SequenceParallelKind, checkpoint = false) => results.get(keyOf(p, { seq: n, kind, checkpoint }))!;
  const strong = f.ranks.flatMap((p) => seqs.map((n) => ({ p, n, u: get(p, n, "ulysses"), a: get(p, n, "allgather") })));
  const commSplit = (r: Row) => `${ms(r.attentionCommMs + r.gradCommMs)}/${ms(r.computeMs)}`;
  console.log(
    `\nTransformerBlock forward+backward, hidden ${f.hidden}, ${f.heads} heads, batch ${f.batch}, causal, threads backend + ONNX Runtime (${cpus().length} cores)`,
  );
  console.log(
    "step = slowest rank; comm/compute = mean ms inside collectives (incl. waiting for peers) / the rest; attn MB = attention exchanges per rank (fwd+bwd), grad MB = weight-gradient all-reduce\n",
  );
  console.log(
    table(
      [
        "P",
        "N",
        "Ulysses ms",
        "AG-KV ms",
        "AG/U time",
        "U tok/s",
        "AG tok/s",
        "U attn MB",
        "AG attn MB",
        "AG/U bytes",
        "U comm/compute",
        "AG comm/compute",
        "grad MB",
      ],
      strong.map(({ p, n, u, a }) => [
        String(p),
        String(n),
        ms(u.stepMs),
        ms(a.stepMs),
        (a.stepMs / u.stepMs).toFixed(2),
        u.tokensPerSecond.toFixed(0),
        a.tokensPerSecond.toFixed(0),
        mb(u.attentionBytesPerRank),
        mb(a.attentionBytesPerRank),
        (a.attentionBytesPerRank / u.attentionBytesPerRank).toFixed(2),
        commSplit(u),
        commSplit(a),
        mb(u.gradBytesPerRank),
      ]),
    ),
  );
  const weak = f.weak
    ? f.weakRanks.map((p) => ({ p, n: f.weakPerRank * p, u: get(p, f.weakPerRank * p, "ulysses"), a: get(p, f.weakPerRank * p, "allgather") }))
    : [];
  if (weak.length > 0) {
    console.log(`\nWeak scaling: N/P = ${f.weakPerRank} tokens per rank`);
    console.log(
      table(
        ["P", "N", "U attn MB/rank", "AG attn MB/rank", "U ms", "AG ms", "bytes = formula"],
        weak.map(({ p, n, u, a }) => [
          String(p),
          String(n),
          mb(u.attentionBytesPerRank),
          mb(a.attentionBytesPerRank),
          ms(u.stepMs),
          ms(a.stepMs),
          String(u.attentionBytesPerRank === u.expectedAttentionBytes && a.attentionBytesPerRank === a.expectedAttentionBytes),
        ]),
      ),
    );
  }
  const checkpointRows =
    f.checkpointSeq > 0
      ? f.ranks.map((p) => ({ p, n: f.checkpointSeq, plain: get(p, f.checkpointSeq, "ulysses"), ckpt: get(p, f.checkpointSeq, "ulysses", true) }))
      : [];
  if (checkpointRows.length > 0) {
    console.log(`\nActivation checkpointing (Ulysses, N = ${f.checkpointSeq}): bytes kept for backward and traffic per rank`);
    console.log(
      table(
        ["P", "N", "saved MB", "saved MB (ckpt)", "saved ratio", "attn MB", "attn MB (ckpt)", "ms", "ms (ckpt)"],
        checkpointRows.map(({ p, n, plain, ckpt }) => [
          String(p),
          String(n),
          mb(plain.savedBytesPerRank),
          mb(ckpt.savedBytesPerRank),
          (plain.savedBytesPerRank / ckpt.savedBytesPerRank).toFixed(1),
          mb(plain.attentionBytesPerRank),
          mb(ckpt.attentionBytesPerRank),
          ms(plain.stepMs),
          ms(ckpt.stepMs),
        ]),
      ),
    );
  }
  const mismatched = [...results.values()].filter((r) => r.attentionBytesPerRank !== r.expectedAttentionBytes);
  for (const r of mismatched)
    console.log(`BYTES DIFFER from the formula: P=${r.ranks} N=${r.seq} ${r.kind}: ${r.attentionBytesPerRank} != ${r.expectedAttentionBytes}`);

  const outDir = fileURLToPath(new URL("../../../bench-results/", import.meta.url));
  mkdirSync(outDir, { recursive: true });
  const file = `${outDir}block.json`;
  writeFileSync(
    file,
    `${JSON.stringify({ bench: "block", date: new Date().toISOString(), cores: cpus().length, cpu: cpus()[0]?.model, flags: f, totalSeconds: (performance.now() - started) / 1000, strong, weak, checkpoint: checkpointRows, rows: [...results.values()] }, null, 2)}\n`,
  );
  console.log(`\nwrote ${file} (${((performance.now() - started) / 1000).toFixed(0)} s)`);
  if (mismatched.length > 0) process.exitCode = 1;
}

await main();
