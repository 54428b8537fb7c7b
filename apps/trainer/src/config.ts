/**
 * The run configuration: every flag of the CLI and every key of a
 * `--config file.json` (same names, camelCase or kebab-case), its defaults,
 * and the validation that runs before any rank starts. Parsing argv is
 * `args.ts`'s job; running is `run.ts`'s.
 */
import fs from "node:fs";
import { blockConfigOf, type GptConfig } from "@ulysses/model";
import type { ParallelDimsOptions, SequenceLayoutKind, SequenceParallelKind } from "@ulysses/parallel";
import { recallMinVocab, BYTE_VOCAB, type LongDocuments, type RecallTaskOptions, type TextFormatOption } from "@ulysses/training";
import { dataDigest } from "./data-config.js";

export interface TrainConfig {
  /** Sequence-parallel degree (ranks sharing one sequence). */
  sp: number;
  /** Data-parallel degree (groups of SP ranks on different batches). */
  dp: number;
  /** threads | mpi | a module path exporting a collectives backend. */
  backend: string;
  task: "recall" | "text";
  /** Text data for --task text (byte-level, vocab 256): a file, or a folder of .txt files. */
  data: string | null;
  /** How --data is read: auto (a folder: txt-dir, *.jsonl: jsonl, else text) | text | jsonl | txt-dir. */
  dataFormat: TextFormatOption;
  /** Plain text: the string between documents (\n, \r, \t and \\ are escapes); null: the file is one stream of text. */
  docSeparator: string | null;
  /** Documents longer than one row: split into documents of their own, or continue as one across rows. */
  longDocuments: LongDocuments;
  /** Skip and count bad documents instead of failing the run. */
  skipBadDocuments: boolean;
  seq: number;
  layers: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  mlp: "gelu" | "swiglu";
  mlpRatio: number;
  tiedHead: boolean;
  attention: SequenceParallelKind;
  /** Hybrid attention: ranks per Ulysses group (null: --sp / --ring-degree, or gcd(--sp, --kv-heads)). */
  ulyssesDegree: number | null;
  /** Hybrid attention: Ulysses groups around the ring (null: --sp / --ulysses-degree). */
  ringDegree: number | null;
  /** How a sequence is cut over the SP ranks: auto (zigzag when a ring runs, else contiguous) | contiguous | zigzag. */
  sequenceLayout: "auto" | SequenceLayoutKind;
  /** Ulysses: pipeline its exchanges against the attention kernel over this many head groups (1: off). */
  ulyssesHeadGroups: number;
  /** Sequences per data-parallel group per step. */
  batch: number;
  steps: number;
  lr: number;
  minLr: number;
  warmup: number;
  weightDecay: number;
  gradClip: number;
  seed: number;
  /** Recall task: keys per table, values per key, vocabulary (null: the smallest, keys x (values + 1) + 1). */
  keys: number;
  values: number;
  vocab: number | null;
  out: string | null;
  resume: string | null;
  /** Let --out name an existing run or a non-empty directory (its run files are replaced). */
  overwrite: boolean;
  /** Collective timeout and stuck-rank watchdog, in seconds. */
  timeout: number;
  /** Skip the memory preflight (preflight.ts) that refuses a run whose estimate exceeds the memory available. */
  skipMemoryCheck: boolean;
  checkpointEvery: number;
  activationCheckpointing: boolean;
  /** Tiled MLP: rows per tile of each block's MLP in forward and backward (0: off; auto: see tileRowsOf). */
  tileMlp: TileSetting;
  /** Tiled logits and loss: rows per tile of the LM head, softmax and cross-entropy (0: off; auto: see tileRowsOf). */
  tileLoss: TileSetting;
  /** Attention in head groups: each block's attention half (projections, attention, output projection) over this many groups of heads (1: off; auto: see headGroupsOf). */
  tileAttention: TileSetting;
  /** Keep ONNX Runtime's per-session arenas and glibc's default heap (faster at short sequences, more memory). */
  memoryArena: MemoryArenaSetting;
  zero1: boolean;
  logEvery: number;
  /** Export the final model to ONNX (model.onnx in the run directory). */
  export: boolean;
  /** ONNX Runtime threads per rank (default max(1, floor(cores / ranks per process))). */
  threads: number | null;
  /** Local attention kernel: auto (fused when its addon is built, else ort) | fused | ort. */
  kernel: "auto" | "fused" | "ort";
}

export const DEFAULTS: TrainConfig = {
  sp: 2,
  dp: 1,
  backend: "threads",
  task: "recall",
  data: null,
  dataFormat: "auto",
  docSeparator: null,
  longDocuments: "split",
  skipBadDocuments: false,
  seq: 2048,
  layers: 2,
  hidden: 128,
  heads: 4,
  kvHeads: 4,
  mlp: "gelu",
  mlpRatio: 4,
  tiedHead: true,
  attention: "ulysses",
  ulyssesDegree: null,
  ringDegree: null,
  sequenceLayout: "auto",
  ulyssesHeadGroups: 1,
  batch: 1,
  steps: 400,
  lr: 3e-3,
  minLr: 3e-4,
  warmup: 20,
  weightDecay: 0.01,
  gradClip: 1,
  seed: 1234,
  keys: 8,
  values: 8,
  vocab: null,
  out: null,
  resume: null,
  overwrite: false,
  skipMemoryCheck: false,
  timeout: 300,
  checkpointEvery: 100,
  activationCheckpointing: false,
  tileMlp: "auto",
  tileLoss: "auto",
  tileAttention: 1,
  memoryArena: "auto",
  zero1: false,
  logEvery: 10,
  export: true,
  threads: null,
  kernel: "auto",
};

export const BACKENDS = ["threads", "local", "mpi"] as const;

/** --timeout bounds, in seconds: below a second a busy step is taken for a hang; above, Node's timers overflow (2^31 - 1 ms). */
export const MIN_TIMEOUT_S = 1;
export const MAX_TIMEOUT_S = 2_147_483;

/** --weight-decay's largest value (lr x decay is the fraction of each matrix a step removes). */
export const MAX_WEIGHT_DECAY = 1;

/** --threads' largest value per core of the machine: past it ONNX Runtime spends its time starting threads. */
export const MAX_THREADS_PER_CORE = 4;

/** Tokens of a rank's shard in one step (batch x its longest share of seq). */
export function tokensPerRankOf(config: Pick<TrainConfig, "batch" | "seq" | "sp">): number {
  return config.batch * Math.ceil(config.seq / config.sp);
}

/**
 * --memory-arena: true keeps ONNX Runtime's per-session CPU arenas and
 * glibc's dynamic heap (fast: freed buffers are reused without new page
 * faults); false turns the arenas off and fixes glibc's mmap threshold, so
 * freed large buffers go back to the OS (the least memory, slower: every
 * large buffer is new pages); auto picks true unless the run's memory
 * account with arenas would not fit (resolveMemoryArena in preflight.ts).
 */
export type MemoryArenaSetting = boolean | "auto";

/** --tile-mlp / --tile-loss: rows per tile, 0 for off, or auto. */
export type TileSetting = number | "auto";

/** The widest buffer one auto-sized loss tile may hold: [rows, vocab] fp32. */
export const AUTO_TILE_BYTES = 4 * 1024 * 1024;

/**
 * The widest buffer one auto-sized MLP tile may hold: [rows, MLP width] fp32.
 * Twice the loss's: at hidden 256 that is 2048 rows, so SP 2 at N = 4096
 * runs its MLP untiled, 2-3% faster a step than in two 1024-row tiles (2-core
 * VM, side by side), while the tile, not the sequence, still bounds it.
 */
export const AUTO_MLP_TILE_BYTES = 8 * 1024 * 1024;

/**
 * Rows per tile of the MLP and of the LM head + loss (0: untiled), as each
 * rank runs them. A number is taken as given. auto tiles only where the
 * untiled buffer of a rank's shard (tokensPerRankOf rows) would be wider than
 * AUTO_MLP_TILE_BYTES (MLP) or AUTO_TILE_BYTES (loss): then the rows that fit
 * in it, a multiple of 64 (at least 64). So a 32K vocabulary gets 64-row loss
 * tiles, the byte vocabulary 4096-row ones past 4096 tokens per rank, hidden
 * 256 2048-row MLP tiles past 2048, while a small vocabulary or a short shard
 * stays untiled.
 */
export function tileRowsOf(config: TrainConfig): { mlp: number; loss: number } {
  const rowsPerRank = tokensPerRankOf(config);
  const auto = (width: number, bytes: number): number => {
    const rows = Math.max(64, Math.floor(bytes / (4 * width) / 64) * 64);
    return rows >= rowsPerRank ? 0 : rows;
  };
  return {
    mlp: config.tileMlp === "auto" ? auto(blockConfigOf(gptConfigOf(config)).mlpHidden, AUTO_MLP_TILE_BYTES) : config.tileMlp,
    loss: config.tileLoss === "auto" ? auto(vocabOf(config), AUTO_TILE_BYTES) : config.tileLoss,
  };
}

/** The GPT config a training configuration builds (a resumed run uses its checkpoint's instead). */
export function gptConfigOf(config: TrainConfig): GptConfig {
  return {
    vocab: vocabOf(config),
    hidden: config.hidden,
    heads: config.heads,
    kvHeads: config.kvHeads,
    layers: config.layers,
    mlp: config.mlp,
    mlpRatio: config.mlpRatio,
    maxSeq: config.seq,
    tiedHead: config.tiedHead,
  };
}

/** The parallel layout a configuration asks for (ParallelDims' options). */
export function parallelOptionsOf(config: TrainConfig): ParallelDimsOptions {
  const options: ParallelDimsOptions = { sp: config.sp, dp: config.dp, attention: config.attention };
  if (config.ulyssesDegree !== null) options.ulyssesDegree = config.ulyssesDegree;
  if (config.ringDegree !== null) options.ringDegree = config.ringDegree;
  if (config.sequenceLayout !== "auto") options.layout = config.sequenceLayout;
  if (config.ulyssesHeadGroups !== 1) options.headGroups = config.ulyssesHeadGroups;
  return options;
}

/** The vocabulary the task implies: bytes for text; for recall --vocab, or the smallest that holds --keys x --values. */
export function vocabOf(config: TrainConfig): number {
  if (config.task === "text") return BYTE_VOCAB;
  return config.vocab ?? recallMinVocab(config.keys, config.values);
}

/** The stream of the data RNG (seeded with --seed): every rank draws the same global batches from it. */
export const DATA_STREAM = 1_000_003;

/** The recall task's options of a configuration. */
export function recallOptionsOf(config: TrainConfig): RecallTaskOptions {
  return { seq: config.seq, keys: config.keys, values: config.values, vocab: vocabOf(config) };
}

/**
 * Settings a checkpoint may never supply: code (the backend module) and paths
 * (what the run reads and where it writes), and the switches that lift a
 * safety check (--overwrite, --skip-memory-check). Resume takes them from the
 * command line only; saveCheckpoint never records them.
 */
export const NEVER_FROM_CHECKPOINT = ["backend", "data", "out", "resume", "overwrite", "skipMemoryCheck"] as const satisfies readonly (keyof TrainConfig)[];

/** The flags that fix the model's shape (a resumed run takes them from the checkpoint's GPT config); --attention is how it is parallelised, a run setting. */
export const MODEL_SHAPE_KEYS = ["hidden", "layers", "heads", "kvHeads", "mlp", "mlpRatio", "tiedHead"] as const satisfies readonly (keyof TrainConfig)[];

export { dataDigest, textDataOptions, unescapeSeparator, usesDocuments } from "./data-config.js";

/**
 * What a checkpoint records of the run: every setting as plain data except
 * code and paths (NEVER_FROM_CHECKPOINT); for the text task the data file's
 * size and SHA-256 instead of its name (resume checks the --data given then
 * against them and says when they differ).
 */
export function checkpointSettings(config: TrainConfig): Record<string, string | number | boolean | null> {
  const record: Record<string, string | number | boolean | null> = {};
  for (const [key, value] of Object.entries(config)) {
    if (!(NEVER_FROM_CHECKPOINT as readonly string[]).includes(key)) record[key] = value as string | number | boolean | null;
  }
  if (config.task === "text" && config.data !== null) {
    const { bytes, sha256 } = dataDigest(config.data);
    record.dataBytes = bytes;
    record.dataSha256 = sha256;
  }
  return record;
}

/** True when `backend` is a module path rather than a registered name. */
export function isModulePath(backend: string): boolean {
  return backend.startsWith(".") || backend.startsWith("/") || /\.(m?js|ts)$/.test(backend);
}

/** World size the launcher reports, when the process was started by mpirun (or another PMI launcher). */
export function launcherWorldSize(env: NodeJS.ProcessEnv = process.env): number | null {
  const value = env.OMPI_COMM_WORLD_SIZE ?? env.PMI_SIZE ?? env.PMIX_SIZE;
  return value === undefined ? null : Number(value);
}

/** This process's world rank when a launcher (mpirun) started it, else null. */
export function launcherRank(env: NodeJS.ProcessEnv = process.env): number | null {
  const value = env.OMPI_COMM_WORLD_RANK ?? env.PMI_RANK ?? env.PMIX_RANK;
  return value === undefined ? null : Number(value);
}

/** Why `file` cannot be used as an input file, or null when it can (a regular file that exists). */
export function fileProblem(file: string): string | null {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(file);
  } catch (cause) {
    return errnoText(cause);
  }
  return stat.isFile() ? null : stat.isDirectory() ? "is a directory, not a file" : "is not a regular file";
}

/** "no such file or directory (ENOENT)" and the like, from a failed fs call. */
export function errnoText(cause: unknown): string {
  const e = cause as NodeJS.ErrnoException;
  const known: Record<string, string> = {
    ENOENT: "no such file or directory",
    EACCES: "permission denied",
    EPERM: "operation not permitted",
    ENOTDIR: "a parent is not a directory",
    EROFS: "read-only file system",
    ENOSPC: "no space left on the device",
    EEXIST: "already exists",
    EISDIR: "is a directory",
    ELOOP: "too many symbolic links",
    ENAMETOOLONG: "name too long",
    EDQUOT: "disk quota exceeded",
  };
  if (e?.code !== undefined) return `${known[e.code] ?? e.message.replace(/^[A-Z]+: /, "").replace(/, \w+ '.*'$/, "")} (${e.code})`;
  return (cause as Error)?.message ?? String(cause);
}

/** camelCase -> kebab-case (flag names). */
export function kebab(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

/** kebab-case -> camelCase (config keys). */
export function camel(key: string): string {
  return key.replace(/-([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}
