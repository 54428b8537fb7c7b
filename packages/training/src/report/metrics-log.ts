/**
 * Per-step metrics of a training run: the record written to metrics.jsonl
 * (one JSON object per line, appended as steps finish) and reading it back
 * for resume, plots and the summary.
 */
import fs from "node:fs";
import { TrainingError } from "../errors.js";

export interface StepMetrics {
  /** The step just completed, counted from 1 (as the console, summary, plot and checkpoint count). */
  step: number;
  /** When the step finished: ISO-8601 wall-clock time (UTC). */
  time: string;
  loss: number;
  lr: number;
  gradNorm: number;
  tokensPerSec: number;
  stepMs: number;
  computeMs: number;
  commMs: number;
  commBytesPerRank: number;
  peakRssBytes: number;
  /**
   * Model FLOPs per second (@ulysses/measure's count) over the MatMul rate `measureMatmulRate` found at start-up (all ranks). Above 1
   * where that rate was measured on a busy machine: the summary takes the MFU against the higher of it and the run's end measurement.
   */
  mfu: number;
  /**
   * That MatMul rate, FLOP/s: the run's one start-up measurement, on the native-ops addon's path when the addon loads (so another
   * denominator can be applied to the run's speed). Absent in rows written before it was recorded.
   */
  matmulRate?: number;
  /** Recall task: fraction of queries answered correctly this step. */
  accuracy?: number;
  /** Packed documents (text task with documents): documents among the step's global batch (a document continued over rows counts once). */
  documents?: number;
  /** Packed documents: fraction of the global batch's tokens that are padding. */
  padding?: number;
  /** --skip-bad-documents: bad documents skipped so far in the run's data stream (cumulative, kept across a resume). */
  skippedDocuments?: number;
  /** ZeRO-3: the fp32 weights world rank 0 holds between steps (its slice), and those it gathers and holds through a step (two layers' and the final norm's), in elements. */
  weightSlice?: number;
  gatheredWeights?: number;
  /** --profile: world rank 0's calls and milliseconds per op this step (OpProfile's names: "ops.linearForward", "attention.backward", ...). */
  ops?: Record<string, { calls: number; ms: number }>;
}

export interface MetricsFile {
  rows: StepMetrics[];
  /** The half-written last line of an interrupted run, dropped (1-based line number and its length), or null. */
  torn: { line: number; bytes: number } | null;
}

/**
 * Reads a metrics.jsonl file (missing file: no records). A last line that is
 * not a complete record is what a crash in the middle of an append leaves:
 * it is dropped and reported in `torn`. Any other line that is not a record
 * throws a TrainingError naming the file and the line.
 */
export function readMetricsFile(file: string): MetricsFile {
  let text: string;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (cause) {
    if ((cause as NodeJS.ErrnoException).code === "ENOENT") return { rows: [], torn: null };
    throw new TrainingError(`metrics file '${file}' cannot be read: ${(cause as Error).message}`, { cause });
  }
  const lines = text.split("\n");
  const numbered = lines.map((line, i) => ({ line, number: i + 1 })).filter((l) => l.line.trim() !== "");
  const rows: StepMetrics[] = [];
  let torn: MetricsFile["torn"] = null;
  numbered.forEach(({ line, number }, i) => {
    let row: unknown;
    let problem: string | null = null;
    try {
      row = JSON.parse(line);
      const step = (row as { step?: unknown } | null)?.step;
      if (row === null || typeof row !== "object" || Array.isArray(row) || !Number.isSafeInteger(step) || (step as number) < 1)
        problem = "not a metrics record (an object with a step >= 1)";
    } catch (cause) {
      problem = `not valid JSON (${(cause as Error).message})`;
    }
    if (problem === null) {
      rows.push(row as StepMetrics);
    } else if (i === numbered.length - 1) {
      torn = { line: number, bytes: Buffer.byteLength(line) };
    } else {
      throw new TrainingError(`metrics file '${file}' line ${number} is ${problem}: repair or delete that line (only a torn last line is dropped on its own)`);
    }
  });
  return { rows, torn };
}

export class MetricsLog {
  readonly file: string;

  /**
   * Opens `file` for appending; on resume, keeps only the records of steps
   * 1..`keepThroughStep` (the checkpoint's step: rows of steps taken after
   * the checkpoint was saved are dropped, since the resumed run redoes them),
   * read from `from` (default `file`: the run's own history; another run's
   * metrics.jsonl when a run is resumed into a new directory).
   */
  constructor(file: string, keepThroughStep: number | null = null, from: string = file) {
    this.file = file;
    if (keepThroughStep === null) {
      fs.writeFileSync(file, "");
    } else {
      const kept = readMetricsFile(from).rows.filter((m) => m.step <= keepThroughStep);
      fs.writeFileSync(file, kept.map((m) => `${JSON.stringify(m)}\n`).join(""));
    }
  }

  append(metrics: StepMetrics): void {
    fs.appendFileSync(this.file, `${JSON.stringify(metrics)}\n`);
  }
}

/** The records of a metrics.jsonl file (missing file: none; a torn last line is dropped). */
export function readMetrics(file: string): StepMetrics[] {
  return readMetricsFile(file).rows;
}
