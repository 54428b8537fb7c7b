/**
 * The memory preflight: before any rank starts, the run's estimated peak
 * resident memory (the training memory account of @ulysses/training) against
 * the memory available (@ulysses/measure's availableMemory: the cgroup limit,
 * MemAvailable or ULYSSES_MEMORY_LIMIT, whichever is smallest); a run that
 * cannot fit is refused instead of being ended by the kernel's OOM killer
 * minutes later. `--skip-memory-check` turns the check off. Also the arena
 * choice of `--memory-arena auto`.
 */
import { availableMemory, formatBytes, type AvailableMemory, type AvailableMemoryOptions } from "@ulysses/measure";
import { estimateTrainingMemory, type MemoryEstimate } from "@ulysses/training";
import type { TrainConfig } from "./config.js";
import { TrainerError } from "./errors.js";
import { usesNativeOps } from "@ulysses/native-ops";
import { keepsBfloat16, planRun, type RunPlan } from "./plan.js";

/** Ranks whose memory lands on this machine (every rank: threads and local run them in this process; mpirun on one host). */
function placementOf(config: TrainConfig): { ranks: number; processes: number; workers: number } {
  const ranks = config.sp * config.dp;
  if (config.backend === "mpi") return { ranks, processes: ranks, workers: 0 };
  return { ranks, processes: 1, workers: config.backend === "threads" ? ranks : 0 };
}

/** The memory account of a training run on this machine (`memoryArena` auto counts the arenas). */
export function estimateMemory(config: TrainConfig, plan: RunPlan = planRun(config)): MemoryEstimate {
  return estimateTrainingMemory({
    ...plan,
    activationCheckpointing: config.activationCheckpointing,
    zero: config.zero,
    sharedWeights: config.sharedWeights,
    sliceGradientBytes: config.precision === "bf16" ? 2 : 4,
    bfloat16Checkpoints: keepsBfloat16(config, plan),
    keepAttentionOutputs: config.keepAttentionOutputs,
    weightGatherBytes: config.precision === "bf16" && config.zero === 3 ? 2 : 4,
    memoryArena: config.memoryArena !== false,
    nativeOps: usesNativeOps(config.kernel),
    placement: placementOf(config),
  });
}

export interface MemoryCheckOptions extends AvailableMemoryOptions {
  /** --skip-memory-check: estimate nothing, refuse nothing. */
  skip?: boolean;
  /** The run's plan (default: planned from the config). */
  plan?: RunPlan;
}

/**
 * --memory-arena auto: arenas and glibc's heap (fast) when the account with
 * them fits in the memory available, else off (freed buffers back to the
 * OS), with a note saying so. true and false are taken as given. The
 * allocation never changes results, only speed and memory.
 */
export function resolveMemoryArena(config: TrainConfig, options: MemoryCheckOptions = {}): { memoryArena: boolean; note: string | null } {
  if (config.memoryArena !== "auto") return { memoryArena: config.memoryArena, note: null };
  const withArenas = estimateMemory({ ...config, memoryArena: true }, options.plan).bytes;
  const limit = availableMemory(options);
  if (withArenas <= limit.bytes) return { memoryArena: true, note: null };
  return {
    memoryArena: false,
    note:
      `memory: with ONNX Runtime arenas this run needs an estimated ${formatBytes(withArenas)}, more than the ${formatBytes(limit.bytes)} available (${limit.source}); ` +
      "it runs with arenas off and freed buffers returned to the OS (--no-memory-arena: less memory, slower; --memory-arena forces the arenas)",
  };
}

/** The breakdown as indented lines. */
export function formatEstimate(estimate: MemoryEstimate): string {
  const width = Math.max(...estimate.terms.map((t) => t.name.length));
  return estimate.terms.map((t) => `    ${t.name.padEnd(width)}  ${formatBytes(t.bytes).padStart(10)}`).join("\n");
}

/**
 * Refuses a run whose memory estimate exceeds the memory available, with the
 * estimate (broken down), the limit and where it comes from, and the hint
 * `--skip-memory-check`. Returns the estimate and the limit (null when skipped).
 */
export function checkMemory(config: TrainConfig, options: MemoryCheckOptions = {}): { estimate: MemoryEstimate; available: AvailableMemory } | null {
  if (options.skip === true) return null;
  let estimate: MemoryEstimate;
  try {
    estimate = estimateMemory(config, options.plan);
  } catch (cause) {
    throw new TrainerError(`invalid model size: ${(cause as Error).message}`, { cause });
  }
  const limit = availableMemory(options);
  if (estimate.bytes > limit.bytes) {
    throw new TrainerError(
      `not enough memory: this run needs an estimated ${formatBytes(estimate.bytes)} (${estimate.bytes} bytes), ` +
        `but ${formatBytes(limit.bytes)} (${limit.bytes} bytes) is available (${limit.source}).\n` +
        `  estimate for ${estimate.ranks} rank${estimate.ranks > 1 ? "s" : ""} on this machine, ${estimate.tokensPerRank} tokens each:\n${formatEstimate(estimate)}\n` +
        `  Use a shorter --seq, a smaller --batch or model, --activation-checkpointing, --tile-mlp, --tile-loss, --tile-attention, --zero 1, 2 or 3, or --shared-weights; ` +
        `or pass --skip-memory-check to run anyway.`,
    );
  }
  return { estimate, available: limit };
}
