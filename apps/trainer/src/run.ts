/**
 * The driver: prepares the run directory, starts the ranks through a
 * RankPool, calls one step at a time, and (on world rank 0's process only)
 * writes metrics.jsonl, the progress line, checkpoints, loss.svg, model.onnx
 * and the summary. Ctrl-C finishes the current step, saves a checkpoint and
 * stops; a second Ctrl-C stops at once (checkpoints are written atomically,
 * so the last complete one survives). Rank failures propagate as errors
 * naming the rank.
 */
import fs from "node:fs";
import path from "node:path";
import { exportOnnx, type GptConfig } from "@ulysses/model";
import type { TrainConfig } from "./config.js";
import { TrainerError } from "./errors.js";
import { measureMatmulRate, modelFlopsPerStep } from "./flops.js";
import { lossPlotSvg } from "./loss-plot.js";
import { MetricsLog, readMetrics, type StepMetrics } from "./metrics.js";
import { Progress } from "./progress.js";
import { gptConfigOf } from "./rank-trainer.js";
import type { RankPool } from "./rank-pool.js";
import { formatTable, summaryRows } from "./summary.js";

export interface RunOptions {
  config: TrainConfig;
  /** Resolved run directory. */
  outDir: string;
  /** Checkpoint file to resume from, or null. */
  resumeFile: string | null;
  startPool(): Promise<RankPool>;
  /** Where text goes (default stdout). */
  log?: (line: string) => void;
  /** A signal source for Ctrl-C (default process). */
  signals?: NodeJS.EventEmitter;
  /** Stop after this many steps of this invocation (tests simulate an interruption). */
  stopAfter?: number;
}

export interface RunResult {
  metrics: StepMetrics[];
  checkpoint: string;
  interrupted: boolean;
  summary: string;
}

export const CHECKPOINT_FILE = "checkpoint.safetensors";

/** Finds the checkpoint file a --resume value names (a file, or a run directory holding one). */
export function resolveResumeFile(resume: string): string {
  const file = fs.statSync(resume).isDirectory() ? path.join(resume, CHECKPOINT_FILE) : resume;
  if (!fs.existsSync(file)) throw new TrainerError(`--resume '${resume}': no checkpoint at '${file}'`);
  return file;
}

export async function runTraining(options: RunOptions): Promise<RunResult> {
  const { config, outDir } = options;
  const log = options.log ?? ((line: string) => process.stdout.write(`${line}\n`));
  const signals = options.signals ?? process;
  const startedAt = performance.now();
  const pool = await options.startPool();
  const leader = pool.isLeader;
  if (leader) fs.mkdirSync(outDir, { recursive: true });
  const gpt: GptConfig = gptConfigOf(config);
  const checkpoint = path.join(outDir, CHECKPOINT_FILE);
  let stopRequested = false;
  const onSigint = () => {
    if (stopRequested) {
      log("\nsecond Ctrl-C: stopping now; the last complete checkpoint is kept");
      process.exit(130);
    }
    stopRequested = true;
    log("\nCtrl-C: finishing this step and saving a checkpoint (Ctrl-C again to stop at once)");
  };
  signals.on("SIGINT", onSigint);
  try {
    const firstStep = pool.step;
    const metricsLog = leader ? new MetricsLog(path.join(outDir, "metrics.jsonl"), options.resumeFile === null ? null : firstStep - 1) : null;
    const matmulRate = leader ? await measureMatmulRate() : 1;
    const flopsPerStep = modelFlopsPerStep(gpt, config.batch * config.dp * config.seq, config.seq);
    if (leader) {
      log(`ulysses-ts: sp ${config.sp} x dp ${config.dp} on ${config.backend}, ${config.task} task, seq ${config.seq}, batch ${config.batch}, ` + `${config.layers} layers x ${config.hidden} hidden, ${config.heads}/${config.kvHeads} heads, ${config.attention} attention`);
      log(`kernels: ${pool.description}; ORT MatMul rate ${(matmulRate / 1e9).toFixed(1)} GFLOP/s; run directory ${outDir}`);
      if (firstStep > 0) log(`resumed from ${options.resumeFile} at step ${firstStep}`);
    }
    const progress = leader ? new Progress(config.steps, firstStep, config.logEvery) : null;
    const metrics = leader ? readMetrics(path.join(outDir, "metrics.jsonl")) : [];
    let taken = 0;
    for (let step = firstStep; step < config.steps; step++) {
      const r = await pool.runStep();
      const m: StepMetrics = {
        step: r.step,
        loss: r.loss,
        lr: r.lr,
        gradNorm: r.gradNorm,
        tokensPerSec: r.tokens / (r.stepMs / 1000),
        stepMs: r.stepMs,
        computeMs: r.stepMs - r.commMs,
        commMs: r.commMs,
        commBytesPerRank: r.commBytes,
        peakRssBytes: r.peakRssBytes,
        mfu: flopsPerStep / (r.stepMs / 1000) / matmulRate,
      };
      if (config.task === "recall") m.accuracy = r.accuracy;
      metrics.push(m);
      metricsLog?.append(m);
      progress?.update(m);
      taken++;
      const done = step + 1;
      const last = done === config.steps;
      if (!last && config.checkpointEvery > 0 && done % config.checkpointEvery === 0) await pool.save(checkpoint);
      if (stopRequested || (options.stopAfter !== undefined && taken >= options.stopAfter)) break;
    }
    progress?.finish();
    await pool.save(checkpoint);
    const interrupted = pool.step < config.steps;
    if (leader && !interrupted && config.export) {
      exportOnnx(path.join(outDir, "model.onnx"), gpt, await pool.weights());
    }
    let summary = "";
    if (leader) {
      fs.writeFileSync(path.join(outDir, "loss.svg"), lossPlotSvg(metrics, `loss: ${config.task}, sp ${config.sp}, dp ${config.dp}, seq ${config.seq}`));
      const setup = `sp ${config.sp} x dp ${config.dp} (${config.backend}), seq ${config.seq}, batch ${config.batch}, L${config.layers} H${config.hidden}`;
      summary = formatTable(summaryRows(metrics, { setup, wallSeconds: (performance.now() - startedAt) / 1000, outDir }));
      fs.writeFileSync(path.join(outDir, "summary.txt"), `${summary}\n`);
      log(summary);
      log(interrupted ? `stopped at step ${pool.step}; resume with --resume ${outDir}` : `checkpoint: ${checkpoint}`);
    }
    return { metrics, checkpoint, interrupted, summary };
  } finally {
    signals.off("SIGINT", onSigint);
    await pool.close();
  }
}
