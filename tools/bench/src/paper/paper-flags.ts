/**
 * Flags of `pnpm bench:paper` and the sizes they select. The defaults are the
 * full suite (sized to finish in under 20 minutes on 2 idle cores); `--quick`
 * is a ~3-minute smoke run; the other flags enlarge or narrow either.
 */
import path from "node:path";
import { parseFlags, positiveInteger, positiveIntegers, UsageError } from "../cli-flags.js";

export interface PaperFlags {
  quick: boolean;
  hidden: number;
  heads: number;
  /** Throughput rows: SP degrees and sequence lengths. */
  ranks: number[];
  seqs: number[];
  /** Rows with N above this run no warm-up step. */
  warmupMaxSeq: number;
  /** Timed steps per throughput row (the median is reported). */
  timedSteps: number;
  /** Communication volume: tokens per rank (weak scaling) and the fixed N (strong scaling), P = 1, 2, 4. */
  weakPerRank: number;
  strongSeq: number;
  scaleRanks: number[];
  /** P = 1 calibration points of the projection check (the token counts per rank of the checked rows). */
  calibrationSeqs: number[];
  /** Maximum sequence: per-rank cap (MiB), search granularity (tokens per rank), ranks. */
  capMiB: number;
  searchStep: number;
  searchRanks: number[];
  /** Convergence: training steps per SP degree, and the degrees. */
  trainSteps: number;
  trainRanks: number[];
  /** Kernel-rate measurements: the attention sequence lengths (one thread, 2 heads) and the GEMM rows. */
  attentionSeqs: number[];
  rateRows: number;
  /** Sections to skip (comma-separated names: comm, throughput, maxseq, convergence, projection). */
  skip: Set<string>;
  out: string | null;
}

const FULL: Omit<PaperFlags, "quick" | "skip" | "out"> = {
  hidden: 256,
  heads: 8,
  ranks: [2, 4],
  seqs: [4096, 8192, 16384, 32768],
  warmupMaxSeq: 32768,
  timedSteps: 3,
  weakPerRank: 2048,
  strongSeq: 8192,
  scaleRanks: [1, 2, 4],
  calibrationSeqs: [1024, 2048, 4096, 8192, 16384],
  capMiB: 64,
  searchStep: 512,
  searchRanks: [1, 2, 4],
  trainSteps: 60,
  trainRanks: [1, 2, 4],
  attentionSeqs: [2048, 4096, 8192, 16384, 32768],
  rateRows: 4096,
};

const QUICK: Partial<PaperFlags> = {
  seqs: [2048, 4096],
  weakPerRank: 1024,
  strongSeq: 4096,
  calibrationSeqs: [512, 1024, 2048],
  capMiB: 32,
  searchStep: 256,
  trainSteps: 12,
  attentionSeqs: [1024, 2048, 4096],
  rateRows: 2048,
};

export const PAPER_HELP = `Usage: pnpm bench:paper [flags]

Reproduces DeepSpeed-Ulysses' claims on this machine (communication volume,
throughput, maximum sequence length, convergence) and checks the cluster
projection against the measured steps. Writes bench-results/paper.md,
paper.json, paper-*.svg and tools/project/profiles/this-machine*.json.

  --quick              ~3-minute smoke run (smaller sizes everywhere)
  --seqs LIST          throughput sequence lengths (full: 4096,8192,16384,32768)
  --ranks LIST         throughput SP degrees (default 2,4)
  --hidden N --heads N block size (default 256, 8)
  --cap-mib N          per-rank memory cap of the max-sequence search (full 64, quick 32)
  --train-steps N      convergence steps per SP degree (full 60, quick 12)
  --timed-steps N      timed steps per throughput row, median reported (default 3)
  --skip LIST          sections to skip: comm,throughput,maxseq,convergence,projection
  --out DIR            output folder (default bench-results)
  --rerender [FILE]    render a recorded run's paper.json again (default bench-results/paper.json), measuring nothing
  --help, -h           this text
`;

const FLAGS = {
  quick: { type: "boolean" },
  seqs: { type: "string" },
  ranks: { type: "string" },
  hidden: { type: "string" },
  heads: { type: "string" },
  "cap-mib": { type: "string" },
  "train-steps": { type: "string" },
  "timed-steps": { type: "string" },
  skip: { type: "string" },
  out: { type: "string" },
} as const;

/** Parses argv (without node and the script); returns null for --help. Throws a UsageError naming a bad flag or value. */
export function parsePaperFlags(argv: readonly string[]): PaperFlags | null {
  const values = parseFlags("bench:paper", argv, FLAGS);
  if (values === null) return null;
  const quick = values.quick === true;
  const flags: PaperFlags = { ...FULL, ...(quick ? QUICK : {}), quick, skip: new Set(), out: values.out ?? null };
  if (values.seqs !== undefined) flags.seqs = positiveIntegers("--seqs", values.seqs);
  if (values.ranks !== undefined) flags.ranks = positiveIntegers("--ranks", values.ranks);
  if (values.hidden !== undefined) flags.hidden = positiveInteger("--hidden", values.hidden);
  if (values.heads !== undefined) flags.heads = positiveInteger("--heads", values.heads);
  if (values["cap-mib"] !== undefined) flags.capMiB = positiveInteger("--cap-mib", values["cap-mib"]);
  if (values["train-steps"] !== undefined) flags.trainSteps = positiveInteger("--train-steps", values["train-steps"]);
  if (values["timed-steps"] !== undefined) flags.timedSteps = positiveInteger("--timed-steps", values["timed-steps"]);
  if (values.skip !== undefined) for (const section of values.skip.split(",")) flags.skip.add(section.trim());
  return flags;
}

/**
 * `--rerender [FILE]` (first on the command line): the recorded paper.json to
 * render again, resolved from where pnpm was started (default
 * bench-results/paper.json at the repository root); null for --help.
 */
export function parseRerender(argv: readonly string[], repoRoot: string): string | null {
  const words = argv.filter((word) => word !== "--");
  if (words.includes("--help") || words.includes("-h")) return null;
  if (words[0] !== "--rerender" || words.length > 2 || (words[1] ?? "").startsWith("-")) {
    throw new UsageError(`bench:paper: --rerender takes at most one FILE and no other flag, got '${words.join(" ")}'`);
  }
  return path.resolve(process.env.INIT_CWD ?? process.cwd(), words[1] ?? path.join(repoRoot, "bench-results/paper.json"));
}
