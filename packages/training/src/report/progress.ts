/**
 * Progress output of a training run. On a terminal: one redrawn line with a bar, the step, the
 * loss and the ETA. Otherwise (CI, pipes, files): one plain line every
 * `logEvery` steps and at the last step.
 */
import type { StepMetrics } from "./metrics-log.js";

export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "?";
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const rest = s % 60;
  return h > 0 ? `${h}h${String(m).padStart(2, "0")}m` : m > 0 ? `${m}m${String(rest).padStart(2, "0")}s` : `${rest}s`;
}

export class Progress {
  private readonly startedAt = Date.now();
  private readonly firstStep: number;
  private drawn = false;

  constructor(
    private readonly totalSteps: number,
    firstStep: number,
    private readonly logEvery: number,
    private readonly stream: NodeJS.WriteStream = process.stdout,
    private readonly tty = Boolean(process.stdout.isTTY),
  ) {
    this.firstStep = firstStep;
  }

  /** Reports finished step `m.step` (1-based: the number of steps done). */
  update(m: StepMetrics): void {
    const done = m.step;
    const elapsed = (Date.now() - this.startedAt) / 1000;
    const rate = (done - this.firstStep) / Math.max(elapsed, 1e-9);
    const eta = (this.totalSteps - done) / rate;
    const acc = m.accuracy === undefined ? "" : ` acc ${(100 * m.accuracy).toFixed(1)}%`;
    const skipped = m.skippedDocuments === undefined ? "" : ` skipped ${m.skippedDocuments}`;
    const docs = m.documents === undefined ? "" : ` docs ${m.documents} pad ${(100 * (m.padding ?? 0)).toFixed(1)}%${skipped}`;
    const stats = `loss ${m.loss.toFixed(4)}${acc}${docs} lr ${m.lr.toExponential(2)} ${Math.round(m.tokensPerSec)} tok/s`;
    if (this.tty) {
      const width = 24;
      const filled = Math.round((width * done) / this.totalSteps);
      const bar = `${"#".repeat(filled)}${"-".repeat(width - filled)}`;
      this.stream.write(`\r[${bar}] ${done}/${this.totalSteps} ${stats} ETA ${formatDuration(eta)}\x1b[K`);
      this.drawn = true;
    } else if (done % this.logEvery === 0 || done === this.totalSteps) {
      this.stream.write(`step ${done}/${this.totalSteps} ${stats} elapsed ${formatDuration(elapsed)} ETA ${formatDuration(eta)}\n`);
    }
  }

  /** Prints a message without garbling the bar. */
  message(text: string): void {
    this.finish();
    this.stream.write(`${text}\n`);
  }

  /** Ends the bar line. */
  finish(): void {
    if (this.drawn) this.stream.write("\n");
    this.drawn = false;
  }
}
