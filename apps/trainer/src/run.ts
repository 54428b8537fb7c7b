/**
 * The driver: prepares the run directory, starts the ranks through a
 * RankPool, calls one step at a time, and (on world rank 0's process only)
 * writes metrics.jsonl, the progress line, checkpoints, loss.svg, model.onnx
 * and the summary. SIGINT (Ctrl-C) and SIGTERM (Slurm, Kubernetes, docker
 * stop) both finish the current step, save a checkpoint, write the outputs
 * and stop (the CLI then exits 130 or 143); a second signal stops at once
 * (checkpoints are written atomically, so the last complete one survives).
 * Rank failures propagate as errors naming the rank.
 */
import { launcherRank } from "@ulysses/collectives";
import fs from "node:fs";
import path from "node:path";
import { COLLECT_GARBAGE_EVERY_BYTES } from "@ulysses/kernels";
import { sequenceParallelScheme } from "@ulysses/parallel";
import { keepsBfloat16, planRun, type RunPlan } from "./plan.js";
import { hfModelOf } from "./hf-model.js";
import { exportRunHf, HF_DIR } from "./hf-export.js";
import { measureMatmulRate } from "@ulysses/measure";
import { exportOnnx, gptParamSpecs, ParameterStore, type GptConfig } from "@ulysses/model";
import {
  checkpointWeights,
  errnoText,
  formatTable,
  lossPlotSvg,
  MetricsLog,
  Progress,
  readMetrics,
  recallBatch,
  recallReport,
  resolveTextFormat,
  summaryRows,
  type RunFiles,
  type StepMetrics,
  fileProblem,
} from "@ulysses/training";
import { Rng } from "@ulysses/tensors";
import { DATA_STREAM, recallOptionsOf, textDataOptions, usesDocuments, type TrainConfig } from "./config.js";
import { EXIT } from "./entry-point.js";
import { TrainerError } from "./errors.js";
import { matmulRateCache } from "./kernels.js";
import { modelFlopsOverPairs, modelFlopsPerStep } from "./flops.js";
import { profileRows } from "./profile-rows.js";
import type { RankPool } from "./rank-pool.js";

export interface RunOptions {
  config: TrainConfig;
  /** Resolved run directory. */
  outDir: string;
  /** Checkpoint file to resume from, or null. */
  resumeFile: string | null;
  startPool(): Promise<RankPool>;
  /** Where text goes (default stdout). */
  log?: (line: string) => void;
  /** A source of SIGINT and SIGTERM (default process). */
  signals?: NodeJS.EventEmitter;
  /** Stop after this many steps of this invocation (tests simulate an interruption). */
  stopAfter?: number;
  /** The model's config (default gptConfigOf(config); on resume the checkpoint's, whose maxSeq may exceed --seq). */
  model?: GptConfig;
  /** The run resolved once (default: planned here from `config` and `model`). */
  plan?: RunPlan;
  /** On resume, the metrics.jsonl whose rows up to the checkpoint's step the run keeps (default the run directory's own). */
  metricsFrom?: string;
}

export interface RunResult {
  metrics: StepMetrics[];
  checkpoint: string;
  /** Stopped before the last step (a signal, or `stopAfter`). */
  interrupted: boolean;
  /** The signal that asked the run to stop, if one did. */
  stopSignal: StopSignal | null;
  summary: string;
}

/** The signals that stop a run gracefully. */
export const STOP_SIGNALS = ["SIGINT", "SIGTERM"] as const;
export type StopSignal = (typeof STOP_SIGNALS)[number];

/** Exit status for a run stopped by `signal` (128 + the signal number, as a shell reports it). */
export const SIGNAL_EXIT_CODES: Record<StopSignal, number> = { SIGINT: EXIT.SIGINT, SIGTERM: EXIT.SIGTERM };

const SIGNAL_NAMES: Record<StopSignal, string> = { SIGINT: "Ctrl-C (SIGINT)", SIGTERM: "SIGTERM" };

export const CHECKPOINT_FILE = "checkpoint.safetensors";

/** What a run writes into its directory, and the files that make a directory a run. */
export const RUN_FILES: RunFiles = {
  files: [CHECKPOINT_FILE, "metrics.jsonl", "config.json", "model.onnx", HF_DIR, "loss.svg", "summary.txt"],
  markers: [CHECKPOINT_FILE, "metrics.jsonl", "config.json"],
};

/** Finds the checkpoint file a --resume value names (a file, or a run directory holding one). */
export function resolveResumeFile(resume: string): string {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(resume);
  } catch (cause) {
    throw new TrainerError(`--resume '${resume}': ${errnoText(cause)}`);
  }
  if (!stat.isDirectory()) {
    if (!stat.isFile()) throw new TrainerError(`--resume '${resume}' is not a regular file or a run directory`);
    return resume;
  }
  const file = path.join(resume, CHECKPOINT_FILE);
  const problem = fileProblem(file);
  if (problem !== null) throw new TrainerError(`--resume '${resume}': no checkpoint in that directory ('${file}': ${problem})`);
  return file;
}

export async function runTraining(options: RunOptions): Promise<RunResult> {
  const { config, outDir } = options;
  const log = options.log ?? ((line: string) => process.stdout.write(`${line}\n`));
  const signals = options.signals ?? process;
  const startedAt = performance.now();
  let stopSignal: StopSignal | null = null;
  const handlers = STOP_SIGNALS.map((signal) => {
    const handler = () => {
      if (stopSignal !== null) {
        log(`\nsecond signal (${SIGNAL_NAMES[signal]}): stopping now; the last complete checkpoint is kept`);
        stopNow(signal);
        return;
      }
      stopSignal = signal;
      log(`\n${SIGNAL_NAMES[signal]}: stopping after the current step and saving a checkpoint (a second signal stops at once)`);
    };
    signals.on(signal, handler);
    return [signal, handler] as const;
  });
  const removeHandlers = () => {
    for (const [signal, handler] of handlers) signals.off(signal, handler);
  };
  // process.exit() here would tear the ranks' worker threads down inside an
  // ONNX Runtime run, which aborts the process (exit 134). With our handlers
  // gone, the signal's default action ends the process at once instead, and
  // the shell or supervisor sees 128 + the signal number (130, 143).
  const stopNow = (signal: StopSignal) => {
    removeHandlers();
    if (signals === process && process.listenerCount(signal) === 0) {
      process.kill(process.pid, signal);
      setTimeout(() => process.exit(SIGNAL_EXIT_CODES[signal]), 2000).unref();
    } else {
      process.exit(SIGNAL_EXIT_CODES[signal]);
    }
  };
  // the machine's MatMul rate (the MFU's denominator), measured before the ranks start: their allocator settings
  // (--no-memory-arena fixes glibc's mmap threshold for the whole process) would slow the measurement itself
  const ratePath = matmulRateCache();
  const matmulRate = (launcherRank(process.env) ?? 0) === 0 ? await measureMatmulRate({ cache: ratePath.cache }) : 1;
  let pool: RankPool;
  try {
    pool = await options.startPool();
  } catch (error) {
    removeHandlers();
    throw error;
  }
  const leader = pool.isLeader;
  if (leader) fs.mkdirSync(outDir, { recursive: true });
  const plan = options.plan ?? planRun(config, { model: options.model });
  const gpt: GptConfig = plan.model;
  const checkpoint = path.join(outDir, CHECKPOINT_FILE);
  try {
    const firstStep = pool.step;
    const metricsLog = leader ? new MetricsLog(path.join(outDir, "metrics.jsonl"), options.resumeFile === null ? null : firstStep, options.metricsFrom) : null;
    const flopsPerStep = modelFlopsPerStep(gpt, config.batch * config.dp * config.seq, config.seq);
    // the report's distances are measured on the first global batch the ranks draw (the data stream from --seed)
    const rng = new Rng(config.seed, DATA_STREAM);
    const firstBatch = () => recallBatch(recallOptionsOf(config), config.batch * config.dp, () => rng.uniform());
    const recall = leader && config.task === "recall" ? recallReport(recallOptionsOf(config), plan, firstBatch()) : null;
    if (leader) {
      log(
        `ulysses-ts: sp ${config.sp} x dp ${config.dp} on ${config.backend}, ${config.task} task, seq ${config.seq}, batch ${config.batch}, ` +
          `${modelText(config, gpt)}, ${schemeText(plan)}`,
      );
      log(`kernels: ${pool.description}; ORT MatMul rate ${(matmulRate / 1e9).toFixed(1)} GFLOP/s (${ratePath.path}); run directory ${outDir}`);
      const { tiles } = plan;
      const lean = [
        config.activationCheckpointing ? `activation checkpointing (each block keeps its input only${config.precision === "bf16" ? ", in bf16" : ""})` : "",
        tiles.mlp > 0 ? `MLP in tiles of ${tiles.mlp} tokens${config.tileMlp === "auto" ? " (auto)" : ""}` : "",
        tiles.attentionHeadGroups > 1
          ? `attention in ${tiles.attentionHeadGroups} head groups${config.tileAttention === "auto" ? " (auto)" : ""}${!config.activationCheckpointing && keepsBfloat16(config, plan) ? " (each block keeps its input and the MLP's input, in bf16)" : ""}${config.keepAttentionOutputs ? ", their outputs kept for backward" : ""}`
          : "",
        tiles.loss > 0 ? `LM head and loss in tiles of ${tiles.loss} tokens${config.tileLoss === "auto" ? " (auto)" : ""}` : "",
        config.zero > 0
          ? `ZeRO-${config.zero} over ${config.sp * config.dp} ranks (${["AdamW moments", "gradients and AdamW moments", "weights, gradients and AdamW moments"][config.zero - 1]} sharded${config.precision === "bf16" ? `, the gradient slices stored in bf16${config.zero === 3 ? ", the weights gathered in bf16" : ""}` : ""})`
          : "",
        config.sharedWeights ? "one copy of the weights per process (--shared-weights)" : "",
      ].filter((part) => part !== "");
      lean.push(
        config.memoryArena === false
          ? `arenas off, freed buffers returned to the OS, freed tensors collected every ${COLLECT_GARBAGE_EVERY_BYTES / 2 ** 20} MiB of outputs (--no-memory-arena)`
          : `ONNX Runtime arenas and glibc's heap${config.memoryArena === "auto" ? " (auto)" : ""}`,
      );
      log(`memory: ${lean.join(", ")}`);
      if (usesDocuments(config)) {
        const text = textDataOptions(config);
        log(
          `data: ${resolveTextFormat(text.path, text.format ?? "auto")} documents from ${text.path}, packed into rows of ${config.seq} tokens ` +
            `(long documents: ${config.longDocuments}${config.skipBadDocuments ? "; bad documents skipped and counted (progress lines, metrics.jsonl, summary.txt)" : ""})`,
        );
      }
      if (recall !== null) log(recall.header);
      if (firstStep > 0) log(`resumed from ${options.resumeFile} at step ${firstStep}`);
    }
    const progress = leader ? new Progress(config.steps, firstStep, config.logEvery) : null;
    const metrics = leader ? readMetrics(path.join(outDir, "metrics.jsonl")) : [];
    let taken = 0;
    for (let step = firstStep; step < config.steps && stopSignal === null; step++) {
      const r = await pool.runStep();
      const m: StepMetrics = {
        step: r.step + 1,
        time: new Date().toISOString(),
        loss: r.loss,
        lr: r.lr,
        gradNorm: r.gradNorm,
        tokensPerSec: r.tokens / (r.stepMs / 1000),
        stepMs: r.stepMs,
        computeMs: r.stepMs - r.commMs,
        commMs: r.commMs,
        commBytesPerRank: r.commBytes,
        peakRssBytes: r.peakRssBytes,
        // packed documents: the pairs this step's masks attend, not the whole rows' N(N+1)/2
        mfu: (r.attendedPairs === undefined ? flopsPerStep : modelFlopsOverPairs(gpt, r.tokens, r.attendedPairs)) / (r.stepMs / 1000) / matmulRate,
        matmulRate,
      };
      if (config.task === "recall") m.accuracy = r.accuracy;
      // packed documents (text task): the rank's report carries the global batch's counts
      const packing = r as { documents?: number; padding?: number; skippedDocuments?: number };
      if (packing.documents !== undefined) {
        m.documents = packing.documents;
        m.padding = packing.padding ?? 0;
      }
      if (config.skipBadDocuments && packing.skippedDocuments !== undefined) m.skippedDocuments = packing.skippedDocuments;
      if (r.weightSlice !== undefined) {
        m.weightSlice = r.weightSlice;
        m.gatheredWeights = r.gatheredWeights;
      }
      if (r.ops !== undefined) m.ops = r.ops;
      metrics.push(m);
      metricsLog?.append(m);
      progress?.update(m);
      taken++;
      const done = step + 1;
      const last = done === config.steps;
      if (!last && config.checkpointEvery > 0 && done % config.checkpointEvery === 0) await pool.save(checkpoint);
      if (stopSignal !== null || (options.stopAfter !== undefined && taken >= options.stopAfter)) break;
    }
    progress?.finish();
    await pool.save(checkpoint);
    const interrupted = pool.step < config.steps;
    if (leader && !interrupted && config.export) {
      // ZeRO-3: no rank holds the weights whole; the checkpoint just written does, read tensor by tensor
      const weights = config.zero === 3 && config.sp * config.dp > 1 ? weightsOf(checkpoint, gpt) : await pool.weights();
      await exportOnnx(path.join(outDir, "model.onnx"), gpt, weights);
      exportRunHf(outDir, config, gpt, weights);
    }
    let summary = "";
    if (leader) {
      // the MatMul rate again, the steps done: either measurement may have met a busy machine, so the MFU is against the higher
      const matmulRateEnd = await measureMatmulRate({ cache: ratePath.cache });
      fs.writeFileSync(path.join(outDir, "loss.svg"), lossPlotSvg(metrics, `loss: ${config.task}, sp ${config.sp}, dp ${config.dp}, seq ${config.seq}`));
      const setup = `sp ${config.sp} x dp ${config.dp} (${config.backend}), seq ${config.seq}, batch ${config.batch}, L${gpt.layers} H${gpt.hidden}`;
      const baselines = recall === null ? {} : { chance: recall.chance, withoutFacts: recall.withoutFacts };
      summary = formatTable(summaryRows(metrics, { setup, wallSeconds: (performance.now() - startedAt) / 1000, outDir, matmulRateEnd, ...baselines }));
      const profiled = metrics.at(-1);
      if (profiled?.ops !== undefined) summary += `\n${formatTable(profileRows(profiled))}`;
      fs.writeFileSync(path.join(outDir, "summary.txt"), `${summary}\n`);
      log(summary);
      log(interrupted ? `stopped at step ${pool.step}; resume with --resume ${outDir}` : `checkpoint: ${checkpoint}`);
    }
    return { metrics, checkpoint, interrupted, stopSignal, summary };
  } finally {
    removeHandlers();
    await pool.close();
  }
}

/** The weights of checkpoint `file` of model `gpt`, as one flat vector. */
function weightsOf(file: string, gpt: GptConfig): Float32Array {
  const params = new ParameterStore(gptParamSpecs(gpt));
  checkpointWeights(file, params, gpt);
  return params.values;
}

/** "ulysses attention", "hybrid attention (Ulysses 2 x ring 2, zigzag layout)": the scheme as the run resolves it. */
function schemeText(plan: RunPlan): string {
  if (plan.sp === 1) return `${plan.scheme} attention`;
  return sequenceParallelScheme(plan.scheme).describe(plan, plan.layout);
}

/** "2 layers x 128 hidden, 4/4 heads", with a Hugging Face model's family and source first. */
function modelText(config: TrainConfig, gpt: GptConfig): string {
  const shape = `${gpt.layers} layers x ${gpt.hidden} hidden, ${gpt.heads}/${gpt.kvHeads} heads, vocab ${gpt.vocab}`;
  const hf = hfModelOf(config);
  if (hf === null) return shape;
  return `${hf.family.name} model ${hf.weightsDir === null ? `of '${hf.configFile}' from random weights` : `'${hf.weightsDir}'`} (${shape})`;
}
