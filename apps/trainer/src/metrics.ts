/**
 * Per-step metrics: the record written to metrics.jsonl (one JSON object per
 * line, appended as steps finish) and reading it back for resume and plots.
 */
import fs from "node:fs";

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
  /** Model FLOPs per second over the ONNX Runtime MatMul rate measured at start-up (all ranks). */
  mfu: number;
  /** Recall task: fraction of queries answered correctly this step. */
  accuracy?: number;
}

export class MetricsLog {
  readonly file: string;

  /**
   * Opens `file` for appending; on resume, keeps only the records of steps
   * 1..`keepThroughStep` (the checkpoint's step: rows of steps taken after
   * the checkpoint was saved are dropped, since the resumed run redoes them).
   */
  constructor(file: string, keepThroughStep: number | null = null) {
    this.file = file;
    if (keepThroughStep === null) {
      fs.writeFileSync(file, "");
    } else {
      const kept = readMetrics(file).filter((m) => m.step <= keepThroughStep);
      fs.writeFileSync(file, kept.map((m) => `${JSON.stringify(m)}\n`).join(""));
    }
  }

  append(metrics: StepMetrics): void {
    fs.appendFileSync(this.file, `${JSON.stringify(metrics)}\n`);
  }
}

/** Reads a metrics.jsonl file (missing file: no records). */
export function readMetrics(file: string): StepMetrics[] {
  if (!fs.existsSync(file)) return [];
  return fs
    .readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as StepMetrics);
}
