/**
 * `pnpm bench:memory`' flags: its --help text, the row groups it runs and
 * the parsing of its command line.
 */
import { parseFlags, positiveIntegers, UsageError } from "./cli-flags.js";

export const HELP = `Usage: pnpm bench:memory [flags]

Peak RSS and speed of the trainer (2 layers, hidden 256, 8 heads, batch 1,
byte-level text) at SP 1 and SP 2, plain (every tiling off), default (the
trainer's defaults: --tile-mlp auto --tile-loss auto) and lean (default +
--activation-checkpointing --tile-attention auto); slopes per token, the
vocabulary rows (recall task, default, vocab 256 vs 32768), MFU, and the memory account
against every measured peak. Writes bench-results/memory/memory.json and
memory.md.

  --memory-seq LIST   the two sequence lengths of the memory rows' slopes (default 8192,16384)
  --vocab-seq LIST    the two sequence lengths of the vocabulary rows' slopes (default 8192,32768)
  --speed-seq LIST    sequence lengths of the speed rows (default 4096,8192,16384)
  --speed-steps N     steps of a speed row (default 10)
  --speed-warmup N    its first steps, not timed (default 5: step 1 builds every graph, step 2
                      creates the addon's sessions, and the heap and buffer pools grow through
                      about step 6)
  --repeat N          runs of each memory and vocabulary row; its peak is their median (default 3)
  --speed-repeat N    runs of each speed row, SP 1's and SP 2's alternated; tokens/s and MFU are
                      the medians of a row's runs, SP 1 / SP 2 the median of the pairs' ratios
                      (default 5)
  --rows LIST         which groups of rows to run: memory, vocab, speed (default all three);
                      the targets of the groups left out are not checked
  --long              also one lean step at N = 131072, SP 2 (minutes)
  --models            instead of all the above, the model-state table (issue 45): pnpm bench:models
                      --models qwen3-0.6b --seq 16384 --modes lean --states
                      zero1,zero2,zero3,shared,bf16,bf16-noarena --steps 1 (Qwen3-0.6B's shape at SP 2,
                      each ZeRO stage, shared weights, bf16, and bf16 with --no-memory-arena: peak RSS,
                      the account term by term; one step a row, AdamW's moments resident from the start
                      so that its peak is the run's; about 15 minutes a row on 2 cores)
  --help, -h          this text
`;

export const FLAG_OPTIONS = {
  "memory-seq": { type: "string" },
  "vocab-seq": { type: "string" },
  "speed-seq": { type: "string" },
  "speed-steps": { type: "string" },
  "speed-warmup": { type: "string" },
  repeat: { type: "string" },
  "speed-repeat": { type: "string" },
  rows: { type: "string" },
  long: { type: "boolean" },
  models: { type: "boolean" },
} as const;

export interface Flags {
  memorySeq: [number, number];
  vocabSeq: [number, number];
  speedSeq: number[];
  speedSteps: number;
  speedWarmup: number;
  repeat: number;
  speedRepeat: number;
  rows: ReadonlySet<RowGroup>;
  long: boolean;
  /** Run the model-state table (bench:models' MODEL_STATE_TABLE) instead. */
  models: boolean;
}

export type RowGroup = "memory" | "vocab" | "speed";
export const ROW_GROUPS: readonly RowGroup[] = ["memory", "vocab", "speed"];

/** --rows: a comma-separated subset of ROW_GROUPS, each at most once. */
export function rowGroups(text: string): ReadonlySet<RowGroup> {
  const names = text.split(",").map((name) => name.trim());
  const unknown = names.filter((name) => !(ROW_GROUPS as readonly string[]).includes(name));
  if (names.length === 0 || unknown.length > 0 || new Set(names).size !== names.length)
    throw new UsageError(`--rows: expected a comma-separated list of ${ROW_GROUPS.join(", ")}, each at most once, got '${text}'`);
  return new Set(names as RowGroup[]);
}

export function readFlags(argv: readonly string[]): Flags | null {
  const v = parseFlags("bench:memory", argv, FLAG_OPTIONS);
  if (v === null) return null;
  const pair = (flag: "memory-seq" | "vocab-seq", fallback: string): [number, number] => {
    const lengths = positiveIntegers(`--${flag}`, v[flag] ?? fallback);
    if (lengths.length !== 2 || lengths[0]! >= lengths[1]!) throw new UsageError(`--${flag}: expected two increasing lengths, got '${v[flag]}'`);
    return [lengths[0]!, lengths[1]!];
  };
  const stepsText = v["speed-steps"] ?? "10";
  const speedSteps = positiveIntegers("--speed-steps", stepsText)[0]!;
  const speedWarmup = positiveIntegers("--speed-warmup", v["speed-warmup"] ?? "5")[0]!;
  if (speedSteps <= speedWarmup) throw new UsageError(`--speed-steps: more than --speed-warmup (${speedWarmup}) so that a step is timed, got '${stepsText}'`);
  return {
    memorySeq: pair("memory-seq", "8192,16384"),
    vocabSeq: pair("vocab-seq", "8192,32768"),
    speedSeq: positiveIntegers("--speed-seq", v["speed-seq"] ?? "4096,8192,16384"),
    speedSteps,
    speedWarmup,
    repeat: positiveIntegers("--repeat", v.repeat ?? "3")[0]!,
    speedRepeat: positiveIntegers("--speed-repeat", v["speed-repeat"] ?? "5")[0]!,
    rows: rowGroups(v.rows ?? ROW_GROUPS.join(",")),
    long: v.long ?? false,
    models: v.models ?? false,
  };
}

/** `--models`: bench:models' arguments for the model-state table of issue 45. */
export const MODEL_STATE_TABLE = [
  "--models",
  "qwen3-0.6b",
  "--seq",
  "16384",
  "--modes",
  "lean",
  "--states",
  "zero1,zero2,zero3,shared,bf16,bf16-noarena",
  "--steps",
  "1",
];
