/**
 * The memory preflight and the trainer's memory account: before any rank
 * starts, estimate the peak resident memory of a run on this machine and
 * refuse a run that cannot fit in the memory available (the cgroup limit or
 * the free memory, whichever is smaller) instead of letting the kernel's OOM
 * killer end it (`Killed`, exit 137) minutes later. `--skip-memory-check`
 * turns the check off. `pnpm bench:memory` prints the same account next to
 * the measured peak of every row (docs/results/memory).
 *
 * The account counts, for every rank on this machine (all of them for the
 * threads and local backends, each its own process under mpirun on one
 * host), what is alive at the peak, the backward of the last block:
 *
 * - a measured baseline: the process (Node, the loader, ONNX Runtime and its
 *   first sessions) and, on the threads backend, each rank's worker thread;
 * - weights, the flat gradient and one layer's, AdamW moments m and v (1/ranks
 *   of them per rank under --zero1, plus the full pair gathered for a
 *   checkpoint);
 * - saved activations, per token and layer (TransformerBlock's savedBytes):
 *   the block input, norm1's output and statistics, the attention's q, k, v,
 *   out and log-sum-exp in the local kernel's layout (and the output in the
 *   rank's own layout when an exchange moved it), x2, and, unless the MLP is
 *   tiled, norm2's output and statistics and the MLP's up (and gate) and
 *   activation. Activation checkpointing keeps only each block's input, and
 *   the block in backward holds its recomputed attention half; attention in
 *   head groups (--tile-attention) keeps nothing of the attention half, and
 *   its backward holds norm1's output, dx2, dh1 and one group's tensors;
 * - the backward working set, the larger of its two phases, which never
 *   overlap: the loss and the final norm's backward (one loss tile's logits,
 *   softmax and dLogits and the head weight gradient [hidden, vocab] each
 *   tile makes, two of them, the previous one freed but not yet collected;
 *   or, untiled, logits, softmax and dLogits [tokens, vocab]; and the final
 *   norm's input, output and gradient), then one block's backward (the
 *   gradients alive together, the MLP's unless tiled, then the attention's,
 *   and the largest ONNX Runtime op's temporaries; a tiled MLP's one tile:
 *   its recomputed up, activation and their gradients);
 * - the exchange scratch (send and receive areas, the gathered gradients)
 *   when sequence parallelism moves tensors: at most EXCHANGE_CHUNK_BYTES
 *   each for Ulysses and hybrid (their all-to-alls run in chunks), except
 *   Ulysses pipelined over head groups (--ulysses-head-groups), whose
 *   concurrent exchanges are whole;
 * - the local kernel's score tiles (bounded per call).
 *
 * With --no-memory-arena, ONNX Runtime's CPU arenas are off
 * (session-cache.ts) and glibc returns freed large buffers
 * (setMallocMmapThreshold), so nothing else grows with the sequence; with
 * arenas (the default when they fit, resolveMemoryArena) a measured slack on
 * the per-token terms counts what the arenas and glibc's heap keep. The
 * account is meant to be within 15% of the measured peak.
 */
import fs from "node:fs";
import os from "node:os";
import { blockConfigOf, headGradientColumns, headGroupTileRowsOf, parameterCount, validateGptConfig } from "@ulysses/model";
import { EXCHANGE_CHUNK_BYTES, layerFloatsPerToken, sequenceParallelScheme } from "@ulysses/parallel";
import { ARENA_HEAP_GROWING_PERCENT, COLLECT_GARBAGE_EVERY_BYTES, type TrainConfig } from "./config.js";
import { TrainerError } from "./errors.js";
import { usesNativeOps } from "./kernels.js";
import { planRun, type RunPlan } from "./plan.js";

const MiB = 1024 * 1024;
const F32 = 4;

/**
 * Measured baselines (peak RSS of 64-token runs from source with tsx, 2
 * layers, hidden 256, --no-memory-arena, less the terms below; medians of 3
 * runs on a 2-core AMD EPYC VM, 2026-12-04 at 2da7894: 203 MiB at SP 1 on
 * the local backend, 409 MiB at SP 2 on threads): one process with its first
 * rank's sessions, and each worker thread of the threads backend. They were
 * 150 and 88 MiB, fitted on an Intel Xeon VM at 2ba2505 (213 and 449 MiB).
 * On the EPYC VM, 4af5cc3 against 2da7894, alternated, 3 runs each: 204 / 201
 * MiB at SP 1, 473 / 421 at SP 2. The driver's MatMul rate had run through
 * onnxruntime-node, whose ~70 runs each left a 4 MiB output for V8 to
 * collect; on the addon's path (2da7894) the outputs are reused.
 */
export const PROCESS_BASELINE_BYTES = 140 * MiB;
export const WORKER_BASELINE_BYTES = 72 * MiB;
/**
 * With --memory-arena, what the per-session arenas and glibc's heap keep, per byte of the per-token terms, with every op an ONNX
 * Runtime graph (measured: 2570 vs 1338 MiB at N = 16384, SP 2) and with LayerNorm, rope and GELU native (FusedOps: their
 * intermediates are in no session's arena; measured on the speed rows of bench:memory, 2026-12-03, 4K to 16K tokens, SP 1 and 2:
 * 0.35-0.57 per byte beyond a floor of about 90 MiB per rank). Re-fitted with the floor below on the speed rows of bench:memory
 * at 32127cd (2026-12-04, 2-core AMD EPYC VM), once the model gave its spent activations back to FusedOps' pool instead of
 * leaving them to V8 (bad2108): the SP 2 peak at N = 4096 fell from 737 to 697 MiB, and with 0.5 and 40 MiB the account was
 * 19% over it; with 0.3 and 30 MiB every speed row is within 11.4% (SP 1 at 4K under, SP 2 at 4K over, its MLP untiled).
 */
export const ARENA_SLACK = 1.5;
export const NATIVE_OPS_ARENA_SLACK = 0.3;
/**
 * With --memory-arena, what the arenas keep per rank whatever the sequence
 * length: the chunks of the sessions whose shapes do not grow with it (the
 * MLP, loss and head-group tiles, the exchange chunks). Measured on the
 * speed rows of bench:memory (2026-12-02, default tiles): the account
 * without it was 70-80 MiB per rank under the peak at N = 4K.
 *
 * With the native ops: 40 MiB, measured on the speed rows of three
 * bench:memory runs at 2ba2505 and 1585ce4 (2026-12-04, 4K to 16K tokens,
 * SP 1 and 2, 54 runs), where with the worker baseline above every row's
 * median was within 9.5% of the account and every run within 15.1%; with
 * the 80 MiB fitted before, runs were up to 19% over.
 * It fell when the attention kernel moved onto the rank's own thread
 * (AttentionOptions.onCallerThread): its buffers now come from that
 * thread's heap, which the other ops reuse, instead of from the glibc
 * arenas of libuv's pool threads, each keeping its own high-water mark.
 */
export const ARENA_FLOOR_BYTES = 64 * MiB;
/** 30 MiB since bad2108 (see NATIVE_OPS_ARENA_SLACK). */
export const NATIVE_OPS_ARENA_FLOOR_BYTES = 30 * MiB;
/**
 * With --memory-arena, freed tensors that wait longer for V8's full collection once V8's heap grows 10x between them
 * (ARENA_HEAP_GROWING_PERCENT of the config), per rank. Measured on the speed rows of bench:memory (2026-12-03, SP 2, 3 runs each, one step of
 * 12 / 4): the peak grew by 45-50 MiB at N = 4096 and 80 MiB at N = 16384, over both ranks.
 */
export const V8_DEFERRED_BYTES = 40 * MiB;
/** Score tiles and kernel scratch of one rank's local attention (forward scores are capped at 8 MiB per run). */
export const ATTENTION_SCRATCH_BYTES = 16 * MiB;

export interface MemoryTerm {
  name: string;
  bytes: number;
}

export interface MemoryEstimate {
  /** Sum of the terms. */
  bytes: number;
  terms: MemoryTerm[];
  /** Ranks whose memory is counted (those on this machine). */
  ranks: number;
  /** Tokens each rank holds per step (batch x its shard of the sequence). */
  tokensPerRank: number;
}

/** Ranks whose memory lands on this machine (every rank: threads and local run them in this process; mpirun on one host). */
function ranksHere(config: TrainConfig): { ranks: number; processes: number; workers: number } {
  const ranks = config.sp * config.dp;
  if (config.backend === "mpi") return { ranks, processes: ranks, workers: 0 };
  return { ranks, processes: 1, workers: config.backend === "threads" ? ranks : 0 };
}

/** The memory account of a training run on this machine: its estimated peak resident memory, broken down. */
export function estimateMemory(config: TrainConfig, plan: RunPlan = planRun(config)): MemoryEstimate {
  const { model, tiles, tokensPerRank } = plan;
  validateGptConfig(model);
  const { ranks, processes, workers } = ranksHere(config);
  const params = parameterCount(model);
  const block = blockConfigOf(model);
  const tiledMlp = tiles.mlp > 0;
  const tiledLoss = tiles.loss > 0;
  const headGroups = tiles.attentionHeadGroups;
  const perLayer = layerFloatsPerToken(model, plan.sp, plan.scheme, plan.ulyssesDegree, tiledMlp, headGroups);
  const activationFloats = config.activationCheckpointing ? model.layers * model.hidden + perLayer.recomputed : model.layers * perLayer.saved;
  const mlpTileRows = tiledMlp ? Math.min(tiles.mlp, tokensPerRank) : 0;
  const lossTileRows = tiledLoss ? Math.min(tiles.loss, tokensPerRank) : 0;
  // one row tile of a head group's [rows, hidden] term (x2's in forward, dh1's in backward)
  const groupTileFloats = headGroups > 1 ? model.hidden * Math.min(tokensPerRank, headGroupTileRowsOf(model.hidden)) : 0;
  const finalNormFloats = 3 * model.hidden + 2; // the final norm's input, output and gradient
  // Ulysses (unpipelined) and hybrid exchange in chunks: a send and a receive area of at most EXCHANGE_CHUNK_BYTES
  const chunkedExchange = sequenceParallelScheme(plan.scheme).memory({
    sp: plan.sp,
    kvHeads: block.kvHeads,
    headDim: block.headDim,
    degrees: plan,
    headGroups: plan.pipelineHeadGroups,
  }).chunked;
  const exchangeBytes = F32 * perLayer.exchange * tokensPerRank;
  const layerParams = (params - model.vocab * model.hidden * (model.tiedHead ? 1 : 2)) / model.layers;
  const all = (bytesPerRank: number) => bytesPerRank * ranks;
  // The backward's two phases never overlap (GPT.backward drops the final norm's input and gradient before the blocks run backward):
  // first the loss, tile by tile, and the final norm's backward with the final norm's input, output and gradient alive; then the
  // blocks, one at a time, where a tiled MLP's backward (one tile) comes before the attention's gradients exist.
  // Each tile's head weight gradient is made a block of vocabulary columns at a time (headGradientColumns): a new
  // [hidden, columns] tensor from a copy of dLogits' columns [tile rows, columns] (no copy when one block is the whole
  // vocabulary), added into the flat gradient and dropped. With --no-memory-arena the garbage collector runs before an op
  // whose outputs would reach its budget (willAllocate), so the previous block's is gone before a budget-sized one is made
  // (smaller ones are in the freed-tensors term); otherwise V8 decides and the previous one may still be there.
  // With the fused kernel (FusedOps: linearWeightGradientInto) the head's gradient is added in place, with no block at all: the
  // term then over-counts by the blocks (5 MiB per rank at hidden 256, vocab 32768, 64-row tiles), which the account keeps.
  const headGradients = config.memoryArena === false ? 1 : 2;
  const headColumns = tiledLoss ? headGradientColumns(model.hidden, model.vocab, lossTileRows) : model.vocab;
  const headBlockFloats = headColumns === model.vocab ? model.hidden * model.vocab : (model.hidden + lossTileRows) * headColumns;
  const headBlock = headColumns === model.vocab ? "[hidden, vocab]" : `[hidden, ${headColumns} of vocab ${model.vocab}] and its dLogits columns`;
  const lossPhase = tiledLoss
    ? {
        name: `one loss tile: logits and dLogits of ${lossTileRows} tokens x vocab ${model.vocab}, ${headGradients === 1 ? "one block of a tile's head weight gradient" : "two blocks of a tile's head weight gradient"} ${headBlock}, the final norm's input, output and gradient`,
        bytes: F32 * (2 * model.vocab * lossTileRows + headGradients * headBlockFloats + finalNormFloats * tokensPerRank),
      }
    : {
        name: `logits, softmax and their gradient [tokens, vocab ${model.vocab}], the final norm's input, output and gradient`,
        bytes: F32 * (3 * model.vocab + finalNormFloats) * tokensPerRank,
      };
  const blockPhase = {
    name: tiledMlp
      ? `the larger of the attention's gradients${headGroups > 1 ? ` in ${headGroups} head groups` : ""} and one MLP tile of ${mlpTileRows} tokens`
      : "its gradients and the largest op's temporaries",
    bytes: F32 * Math.max(perLayer.backward * tokensPerRank + groupTileFloats, perLayer.mlpTile * mlpTileRows),
  };
  const terms: MemoryTerm[] = [
    {
      name: `runtime baseline (${processes} process${processes > 1 ? "es" : ""}${workers > 0 ? `, ${workers} worker thread${workers > 1 ? "s" : ""}` : ""}: Node, ONNX Runtime sessions)`,
      bytes: processes * PROCESS_BASELINE_BYTES + workers * WORKER_BASELINE_BYTES,
    },
    { name: `weights (${params} fp32 parameters x ${ranks} rank replicas)`, bytes: all(F32 * params) },
    { name: "gradients (flat vector and one layer's)", bytes: all(F32 * (params + layerParams)) },
    {
      name: config.zero1 ? `AdamW moments (ZeRO-1: 1/${ranks} per rank, plus the full pair gathered for a checkpoint)` : "AdamW moments m, v (per rank)",
      bytes: config.zero1 ? 2 * F32 * params + 2 * F32 * params : all(2 * F32 * params),
    },
    {
      name: config.activationCheckpointing
        ? `saved activations (checkpointing: ${model.layers} layer inputs + ${headGroups > 1 ? "norm1's output" : "one recomputed attention half"}, ${tokensPerRank} tokens per rank)`
        : `saved activations (${model.layers} layers x ${perLayer.saved} floats per token${tiledMlp ? ", MLP tiled" : ""}${headGroups > 1 ? ", attention in head groups" : ""}, ${tokensPerRank} tokens per rank)`,
      bytes: all(F32 * activationFloats * tokensPerRank),
    },
    {
      name: `backward working set, the larger of its two phases: the loss and the final norm's backward (${lossPhase.name}) or one block's backward (${blockPhase.name})`,
      bytes: all(Math.max(lossPhase.bytes, blockPhase.bytes)),
    },
    {
      name: `attention working buffers (score tiles; head dim ${block.headDim})`,
      bytes: all(ATTENTION_SCRATCH_BYTES),
    },
    {
      name: `sequence-parallel exchange scratch (send and receive areas${headGroups > 1 ? ", one head group's" : ""}${chunkedExchange ? `, in chunks of at most ${EXCHANGE_CHUNK_BYTES / MiB} MiB` : ""})`,
      // chunks are sized on the whole tensors (seqAllToAll's chunkCount); the travelling share of one fills the areas
      bytes: all(chunkedExchange ? Math.min(exchangeBytes, 2 * EXCHANGE_CHUNK_BYTES * perLayer.travels) : exchangeBytes),
    },
  ];
  if (config.memoryArena === false) {
    terms.push({
      name: `freed tensors awaiting V8's collection (at most ${COLLECT_GARBAGE_EVERY_BYTES / MiB} MiB of op outputs per rank, --no-memory-arena)`,
      bytes: all(COLLECT_GARBAGE_EVERY_BYTES),
    });
  } else {
    // the terms after the baseline, weights, gradients and moments, less the fixed attention scratch
    const perToken = terms.slice(4).reduce((n, t) => n + t.bytes, 0) - all(ATTENTION_SCRATCH_BYTES);
    const native = usesNativeOps(config.kernel);
    const slack = native ? NATIVE_OPS_ARENA_SLACK : ARENA_SLACK;
    const floor = native ? NATIVE_OPS_ARENA_FLOOR_BYTES : ARENA_FLOOR_BYTES;
    terms.push({
      name: `ONNX Runtime arenas and glibc-retained buffers (--memory-arena${native ? ", LayerNorm, rope and GELU native" : ""}: ${slack}x the per-token terms and ${floor / MiB} MiB per rank, measured)`,
      bytes: slack * perToken + all(floor),
    });
    terms.push({
      name: `freed tensors awaiting V8's full collection (--memory-arena: V8's heap grows ${1 + ARENA_HEAP_GROWING_PERCENT / 100}x between them, ${V8_DEFERRED_BYTES / MiB} MiB per rank, measured)`,
      bytes: all(V8_DEFERRED_BYTES),
    });
  }
  return { bytes: terms.reduce((n, t) => n + t.bytes, 0), terms, ranks, tokensPerRank };
}

/** Reads a file's text, or null when it is missing or unreadable. */
export type ReadText = (file: string) => string | null;

const readText: ReadText = (file) => {
  try {
    return fs.readFileSync(file, "utf8");
  } catch {
    return null;
  }
};

/** Values at or above this are cgroup v1's "no limit" (PAGE_COUNTER_MAX pages, about 2^63). */
const CGROUP_V1_UNLIMITED = 2 ** 60;

/** A cgroup memory limit file's value: bytes, or null for no limit ("max", v1's huge sentinel, missing or garbage). */
export function parseCgroupLimit(text: string | null): number | null {
  if (text === null) return null;
  const value = text.trim();
  if (value === "" || value === "max" || !/^\d+$/.test(value)) return null;
  const bytes = Number(value);
  return bytes >= CGROUP_V1_UNLIMITED ? null : bytes;
}

/** `dir` and its ancestors up to (and including) `root`. */
function upTo(root: string, relative: string): string[] {
  const parts = relative.split("/").filter((p) => p !== "" && p !== "." && p !== "..");
  const dirs: string[] = [];
  for (let i = parts.length; i >= 0; i--) dirs.push([root, ...parts.slice(0, i)].join("/"));
  return dirs;
}

export interface CgroupLimit {
  bytes: number;
  file: string;
}

/**
 * The tightest cgroup memory limit over this process's cgroup and its
 * ancestors: cgroup v2 (`memory.max`) and v1 (`memory.limit_in_bytes`),
 * located through /proc/self/cgroup; null when there is none.
 */
export function cgroupMemoryLimit(read: ReadText = readText): CgroupLimit | null {
  const candidates = new Set<string>(["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]);
  for (const line of (read("/proc/self/cgroup") ?? "").split("\n")) {
    const [, controllers, where] = /^\d+:([^:]*):(.*)$/.exec(line.trim()) ?? [];
    if (where === undefined) continue;
    if (controllers === "") for (const dir of upTo("/sys/fs/cgroup", where)) candidates.add(`${dir}/memory.max`);
    if (controllers!.split(",").includes("memory")) for (const dir of upTo("/sys/fs/cgroup/memory", where)) candidates.add(`${dir}/memory.limit_in_bytes`);
  }
  let best: CgroupLimit | null = null;
  for (const file of candidates) {
    const bytes = parseCgroupLimit(read(file));
    if (bytes !== null && (best === null || bytes < best.bytes)) best = { bytes, file };
  }
  return best;
}

/** MemAvailable from /proc/meminfo in bytes, or null. */
export function memAvailable(read: ReadText = readText): number | null {
  const match = /^MemAvailable:\s+(\d+)\s*kB/m.exec(read("/proc/meminfo") ?? "");
  return match === null ? null : Number(match[1]) * 1024;
}

export interface AvailableMemory {
  bytes: number;
  /** Where the number comes from, for the message. */
  source: string;
}

/** Parses a byte count with an optional K, M, G or T suffix (powers of 1024): "8G", "512M", "1073741824". */
export function parseBytes(text: string): number | null {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$/i.exec(text);
  if (match === null) return null;
  const scale = { "": 1, K: 2 ** 10, M: 2 ** 20, G: 2 ** 30, T: 2 ** 40 }[match[2]!.toUpperCase() as "" | "K" | "M" | "G" | "T"];
  return Math.floor(Number(match[1]) * scale);
}

export interface MemoryCheckOptions {
  env?: NodeJS.ProcessEnv;
  /** --skip-memory-check: estimate nothing, refuse nothing. */
  skip?: boolean;
  /** File reader for /proc and /sys (tests inject one). */
  read?: ReadText;
  /** os.freemem() (tests inject one). */
  freemem?: () => number;
  /** The run's plan (default: planned from the config). */
  plan?: RunPlan;
}

/**
 * The memory this run may use: the smallest of the cgroup limit, MemAvailable
 * (os.freemem() where /proc/meminfo is missing) and ULYSSES_MEMORY_LIMIT
 * (bytes, or with a K/M/G/T suffix) when set.
 */
export function availableMemory(options: MemoryCheckOptions = {}): AvailableMemory {
  const read = options.read ?? readText;
  const env = options.env ?? process.env;
  const found: AvailableMemory[] = [];
  const cgroup = cgroupMemoryLimit(read);
  if (cgroup !== null) found.push({ bytes: cgroup.bytes, source: `cgroup limit ${cgroup.file}` });
  const meminfo = memAvailable(read);
  if (meminfo !== null) found.push({ bytes: meminfo, source: "MemAvailable in /proc/meminfo" });
  else found.push({ bytes: (options.freemem ?? os.freemem)(), source: "os.freemem()" });
  const override = env.ULYSSES_MEMORY_LIMIT;
  if (override !== undefined && override !== "") {
    const bytes = parseBytes(override);
    if (bytes === null) throw new TrainerError(`ULYSSES_MEMORY_LIMIT='${override}' is not a byte count (use e.g. 8G, 512M or 1073741824)`);
    found.push({ bytes, source: "ULYSSES_MEMORY_LIMIT" });
  }
  return found.reduce((a, b) => (b.bytes < a.bytes ? b : a));
}

/**
 * --memory-arena auto: arenas and glibc's heap (fast) when the account with
 * them fits in the memory available, else off (freed buffers back to the
 * OS), with a note saying so. true and false are taken as given. The
 * allocation never changes results, only speed and memory.
 */
export function resolveMemoryArena(config: TrainConfig, options: MemoryCheckOptions = {}): { memoryArena: boolean; note: string | null } {
  if (config.memoryArena !== "auto") return { memoryArena: config.memoryArena, note: null };
  const withArenas = estimateMemory({ ...config, memoryArena: true }).bytes;
  const available = availableMemory(options);
  if (withArenas <= available.bytes) return { memoryArena: true, note: null };
  return {
    memoryArena: false,
    note:
      `memory: with ONNX Runtime arenas this run needs an estimated ${formatBytes(withArenas)}, more than the ${formatBytes(available.bytes)} available (${available.source}); ` +
      "it runs with arenas off and freed buffers returned to the OS (--no-memory-arena: less memory, slower; --memory-arena forces the arenas)",
  };
}

/** "1.5 GiB", "320.0 MiB" */
export function formatBytes(bytes: number): string {
  if (bytes >= 2 ** 40) return `${(bytes / 2 ** 40).toFixed(2)} TiB`;
  if (bytes >= 2 ** 30) return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
  if (bytes >= MiB) return `${(bytes / MiB).toFixed(1)} MiB`;
  return `${(bytes / 1024).toFixed(1)} KiB`;
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
  const available = availableMemory(options);
  if (estimate.bytes > available.bytes) {
    throw new TrainerError(
      `not enough memory: this run needs an estimated ${formatBytes(estimate.bytes)} (${estimate.bytes} bytes), ` +
        `but ${formatBytes(available.bytes)} (${available.bytes} bytes) is available (${available.source}).\n` +
        `  estimate for ${estimate.ranks} rank${estimate.ranks > 1 ? "s" : ""} on this machine, ${estimate.tokensPerRank} tokens each:\n${formatEstimate(estimate)}\n` +
        `  Use a shorter --seq, a smaller --batch or model, --activation-checkpointing, --tile-mlp, --tile-loss, --tile-attention or --zero1; ` +
        `or pass --skip-memory-check to run anyway.`,
    );
  }
  return { estimate, available };
}
