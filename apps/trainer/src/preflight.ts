/**
 * The memory preflight: before any rank starts, estimate the peak resident
 * memory of a run on this machine and refuse a run that cannot fit in the
 * memory available (the cgroup limit or the free memory, whichever is
 * smaller) instead of letting the kernel's OOM killer end it (`Killed`, exit
 * 137) minutes later. `--skip-memory-check` turns the check off.
 *
 * The estimate counts, for every rank on this machine (all of them for the
 * threads and local backends, each its own process under mpirun on one host):
 *
 * - weights and gradients: the flat fp32 parameter vector and its gradient,
 *   one replica per rank, plus one layer's flat gradient;
 * - AdamW moments m and v (each rank 1/ranks of them under --zero1, plus the
 *   full pair gathered when a checkpoint is written);
 * - saved activations: what TransformerBlock.forward keeps for backward per
 *   token and layer (x, norm1 output and statistics, the attention's q, k, v,
 *   output and log-sum-exp in the gathered layout, the attention output, x2,
 *   norm2 output and statistics, the MLP's up (and gate) and activation);
 *   with --activation-checkpointing only each layer's input plus one layer's
 *   full set, recomputed in backward;
 * - one layer's backward working set (the gradients of every tensor above);
 * - attention working buffers: the local kernel's score tiles (bounded per
 *   run, see kernels' block-sizes.ts) and the gathered dq, dk, dv;
 * - the all-to-all exchange buffers (send and receive areas for q, k, v and
 *   the output);
 * - logits, their gradient and the softmax for the loss, [tokens, vocab];
 * - what is not tensors we hold: ONNX Runtime's arenas and per-op
 *   temporaries, and garbage the V8 collector has not yet returned. This is
 *   a calibrated multiple of the per-token terms above (SLACK), measured on
 *   the development machine (see the table in the report of issue 15);
 * - a fixed baseline per process (Node, the TypeScript loader, ONNX
 *   Runtime's sessions) and per rank (a worker's isolate and sessions),
 *   measured with a 64-token run.
 *
 * The estimate is meant to be conservative (at or above the measured peak
 * RSS) and within about 1.5x of it for the sizes this trainer runs.
 */
import fs from "node:fs";
import os from "node:os";
import { blockConfigOf, parameterCount, validateGptConfig, type GptConfig } from "@ulysses/model";
import { resolveDims, type SequenceParallelKind } from "@ulysses/parallel";
import { gptConfigOf, parallelOptionsOf, type TrainConfig } from "./config.js";
import { TrainerError } from "./errors.js";

const MiB = 1024 * 1024;
const F32 = 4;

/**
 * Measured baselines (peak RSS of 64-token runs, threads backend, run from
 * source with tsx): one process, and each rank it hosts.
 */
export const PROCESS_BASELINE_BYTES = 220 * MiB;
export const RANK_BASELINE_BYTES = 75 * MiB;
/** Score tiles and kernel scratch of one rank's local attention (forward scores are capped at 8 MiB per run). */
export const ATTENTION_SCRATCH_BYTES = 16 * MiB;
/** Memory ONNX Runtime and the garbage collector hold per byte of the per-token tensors we account for (calibrated). */
export const SLACK = 1.5;

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

/** Floats per token that one layer's forward keeps for backward, and that its backward works with. */
export function layerFloatsPerToken(
  model: GptConfig,
  sp: number,
  kind: SequenceParallelKind,
  ulyssesDegree = kind === "ring" ? 1 : sp,
): { saved: number; backward: number; exchange: number; attention: number } {
  const block = blockConfigOf(model);
  const { hidden, heads, kvHeads, headDim, mlpHidden } = block;
  const qWidth = heads * headDim;
  // k and v as the local kernel sees them, per local token: Ulysses gathers the sequence for the rank's
  // kv heads (replicated up to one per rank when kvHeads < sp); all-gather KV holds every rank's keys;
  // ring holds its own block, the visiting one and the next one arriving; hybrid does the ring on its Ulysses
  // group's tokens with the group's (replicated) kv heads
  const kvWidth =
    kind === "allgather"
      ? kvHeads * headDim * sp
      : kind === "ring"
        ? 3 * kvHeads * headDim
        : kind === "hybrid"
          ? 3 * Math.max(kvHeads, ulyssesDegree) * headDim
          : Math.max(kvHeads, sp) * headDim;
  const normStats = block.norm === "layernorm" ? 2 : 1;
  const mlpTensors = block.mlp === "swiglu" ? 3 : 2;
  const saved =
    hidden + // x (the layer input)
    hidden +
    normStats + // h1, norm1 statistics
    qWidth +
    2 * kvWidth +
    qWidth +
    heads + // the attention context: q, k, v, out, log-sum-exp
    qWidth + // the attention output as the projection's input
    hidden +
    hidden +
    normStats + // x2, h2, norm2 statistics
    mlpTensors * mlpHidden; // up (and gate), activation
  const backward =
    hidden * 6 + // dOut, dh2, dx2, dAttn, dh1, dx
    mlpHidden * (mlpTensors + 1) + // dAct, dUp (and dGate), the sum
    2 * (qWidth + 2 * kvWidth); // dq, dk, dv in both layouts
  const exchange = 2 * (2 * qWidth + 2 * kvWidth); // send and receive areas: q, k, v out, the output back
  const attention = qWidth + 2 * kvWidth; // the gathered dOut and the kernel's row statistics
  return { saved, backward, exchange, attention };
}

/** Ranks whose memory lands on this machine (every rank: threads and local run them in this process; mpirun on one host). */
function ranksHere(config: TrainConfig): { ranks: number; processes: number } {
  const ranks = config.sp * config.dp;
  return { ranks, processes: config.backend === "mpi" ? ranks : 1 };
}

/** Estimates the peak resident memory of a training run on this machine, broken down. */
export function estimateMemory(config: TrainConfig): MemoryEstimate {
  const model = gptConfigOf(config);
  validateGptConfig(model);
  const { ranks, processes } = ranksHere(config);
  const params = parameterCount(model);
  const block = blockConfigOf(model);
  const tokensPerRank = config.batch * Math.ceil(config.seq / config.sp);
  const perLayer = layerFloatsPerToken(model, config.sp, config.attention, resolveDims(parallelOptionsOf(config), model.kvHeads).ulyssesDegree);
  const activationFloats = config.activationCheckpointing ? model.layers * model.hidden + perLayer.saved : model.layers * perLayer.saved;
  const logitsFloats = 3 * model.vocab; // logits, softmax, dLogits
  const finalNormFloats = 2 * model.hidden + 2; // the final norm's input and output
  const perTokenBytes = F32 * (activationFloats + perLayer.backward + perLayer.attention + perLayer.exchange + logitsFloats + finalNormFloats);
  const layerParams = (params - model.vocab * model.hidden * (model.tiedHead ? 1 : 2)) / model.layers;
  const all = (bytesPerRank: number) => bytesPerRank * ranks;
  const terms: MemoryTerm[] = [
    {
      name: `runtime baseline (${processes} process${processes > 1 ? "es" : ""}, ${ranks} rank${ranks > 1 ? "s" : ""}: Node, ONNX Runtime sessions)`,
      bytes: processes * PROCESS_BASELINE_BYTES + ranks * RANK_BASELINE_BYTES,
    },
    { name: `weights (${params} fp32 parameters x ${ranks} rank replicas)`, bytes: all(F32 * params) },
    { name: "gradients (flat vector and one layer's)", bytes: all(F32 * (params + layerParams)) },
    {
      name: config.zero1 ? `AdamW moments (ZeRO-1: 1/${ranks} per rank, plus the full pair gathered for a checkpoint)` : "AdamW moments m, v (per rank)",
      bytes: config.zero1 ? 2 * F32 * params + 2 * F32 * params : all(2 * F32 * params),
    },
    {
      name: config.activationCheckpointing
        ? `saved activations (checkpointing: ${model.layers} layer inputs + one layer, ${tokensPerRank} tokens per rank)`
        : `saved activations (${model.layers} layers x ${perLayer.saved} floats per token, ${tokensPerRank} tokens per rank)`,
      bytes: all(F32 * activationFloats * tokensPerRank),
    },
    { name: "backward working set (one layer's gradients)", bytes: all(F32 * perLayer.backward * tokensPerRank) },
    {
      name: `attention working buffers (score tiles, gathered gradients; head dim ${block.headDim})`,
      bytes: all(ATTENTION_SCRATCH_BYTES + F32 * perLayer.attention * tokensPerRank),
    },
    { name: "all-to-all exchange buffers (send and receive)", bytes: all(F32 * perLayer.exchange * tokensPerRank) },
    {
      name: `logits, softmax and their gradient [tokens, vocab ${model.vocab}], final norm`,
      bytes: all(F32 * (logitsFloats + finalNormFloats) * tokensPerRank),
    },
    { name: `ONNX Runtime arenas and uncollected garbage (${SLACK}x the per-token terms, measured)`, bytes: all(SLACK * perTokenBytes * tokensPerRank) },
  ];
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
    estimate = estimateMemory(config);
  } catch (cause) {
    throw new TrainerError(`invalid model size: ${(cause as Error).message}`, { cause });
  }
  const available = availableMemory(options);
  if (estimate.bytes > available.bytes) {
    throw new TrainerError(
      `not enough memory: this run needs an estimated ${formatBytes(estimate.bytes)} (${estimate.bytes} bytes), ` +
        `but ${formatBytes(available.bytes)} (${available.bytes} bytes) is available (${available.source}).\n` +
        `  estimate for ${estimate.ranks} rank${estimate.ranks > 1 ? "s" : ""} on this machine, ${estimate.tokensPerRank} tokens each:\n${formatEstimate(estimate)}\n` +
        `  Use a shorter --seq, a smaller --batch or model, --activation-checkpointing or --zero1; ` +
        `or pass --skip-memory-check to run anyway.`,
    );
  }
  return { estimate, available };
}
