/**
 * The run configuration: every flag of the CLI and every key of a
 * `--config file.json` (same names, camelCase or kebab-case), its defaults,
 * and the validation that runs before any rank starts. Parsing argv is
 * `args.ts`'s job; running is `run.ts`'s.
 */
import fs from "node:fs";
import { ByteTextData, recallMinSeq, recallVocabulary, BYTE_VOCAB } from "@ulysses/model";
import { TrainerError } from "./errors.js";

export interface TrainConfig {
  /** Sequence-parallel degree (ranks sharing one sequence). */
  sp: number;
  /** Data-parallel degree (groups of SP ranks on different batches). */
  dp: number;
  /** threads | mpi | a module path exporting a collectives backend. */
  backend: string;
  task: "recall" | "text";
  /** Text file for --task text (byte-level, vocab 256). */
  data: string | null;
  seq: number;
  layers: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  mlp: "gelu" | "swiglu";
  mlpRatio: number;
  tiedHead: boolean;
  attention: "ulysses" | "allgather";
  /** Sequences per data-parallel group per step. */
  batch: number;
  steps: number;
  lr: number;
  minLr: number;
  warmup: number;
  weightDecay: number;
  gradClip: number;
  seed: number;
  /** Recall task: vocabulary, key-value pairs per sequence, queries per sequence. */
  vocab: number;
  pairs: number;
  queries: number;
  out: string | null;
  resume: string | null;
  checkpointEvery: number;
  activationCheckpointing: boolean;
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
  seq: 128,
  layers: 2,
  hidden: 128,
  heads: 4,
  kvHeads: 4,
  mlp: "gelu",
  mlpRatio: 4,
  tiedHead: false,
  attention: "ulysses",
  batch: 8,
  steps: 1000,
  lr: 2e-3,
  minLr: 3e-4,
  warmup: 20,
  weightDecay: 0.01,
  gradClip: 1,
  seed: 1234,
  vocab: 32,
  pairs: 3,
  queries: 3,
  out: null,
  resume: null,
  checkpointEvery: 100,
  activationCheckpointing: false,
  zero1: false,
  logEvery: 10,
  export: true,
  threads: null,
  kernel: "auto",
};

export const BACKENDS = ["threads", "local", "mpi"] as const;

/** The vocabulary the task implies. */
export function vocabOf(config: TrainConfig): number {
  return config.task === "text" ? BYTE_VOCAB : config.vocab;
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

/**
 * Checks a configuration before any rank starts; throws a TrainerError
 * listing every problem with the offending values.
 */
export function validateConfig(config: TrainConfig, env: NodeJS.ProcessEnv = process.env): void {
  const problems: string[] = [];
  const positive = (key: keyof TrainConfig) => {
    const value = config[key];
    if (typeof value !== "number" || !Number.isInteger(value) || value < 1) problems.push(`--${kebab(key)} must be a positive integer, got ${String(value)}`);
  };
  for (const key of ["sp", "dp", "seq", "layers", "hidden", "heads", "kvHeads", "batch", "steps", "logEvery", "pairs", "queries", "vocab"] as const) positive(key);
  if (!Number.isInteger(config.checkpointEvery) || config.checkpointEvery < 0) problems.push(`--checkpoint-every must be 0 (only at the end) or a positive integer, got ${config.checkpointEvery}`);
  if (!Number.isInteger(config.warmup) || config.warmup < 0) problems.push(`--warmup must be a non-negative integer, got ${config.warmup}`);
  if (!Number.isInteger(config.seed) || config.seed < 0) problems.push(`--seed must be a non-negative integer, got ${config.seed}`);
  for (const key of ["lr", "minLr", "weightDecay", "gradClip", "mlpRatio"] as const) {
    if (!(typeof config[key] === "number" && Number.isFinite(config[key]) && config[key] >= 0)) problems.push(`--${kebab(key)} must be a non-negative number, got ${String(config[key])}`);
  }
  if (!(config.lr > 0)) problems.push(`--lr must be positive, got ${config.lr}`);
  if (config.threads !== null && (!Number.isInteger(config.threads) || config.threads < 1)) problems.push(`--threads must be a positive integer, got ${config.threads}`);
  if (!["recall", "text"].includes(config.task)) problems.push(`--task must be recall or text, got '${config.task}'`);
  if (!["gelu", "swiglu"].includes(config.mlp)) problems.push(`--mlp must be gelu or swiglu, got '${config.mlp}'`);
  if (!["auto", "fused", "ort"].includes(config.kernel)) problems.push(`--kernel must be auto, fused or ort, got '${config.kernel}'`);
  if (!["ulysses", "allgather"].includes(config.attention)) problems.push(`--attention must be ulysses or allgather, got '${config.attention}'`);
  if (!(BACKENDS as readonly string[]).includes(config.backend) && !isModulePath(config.backend)) {
    problems.push(`unknown backend '${config.backend}': use ${BACKENDS.join(", ")} or a module path (./my-backend.js)`);
  } else if (isModulePath(config.backend) && !fs.existsSync(config.backend)) {
    problems.push(`backend module '${config.backend}' does not exist`);
  }
  if (problems.length === 0) {
    const { sp, dp, seq, hidden, heads, kvHeads } = config;
    if (hidden % heads !== 0) problems.push(`--hidden ${hidden} is not divisible by --heads ${heads}`);
    else if ((hidden / heads) % 2 !== 0) problems.push(`head dimension hidden/heads = ${hidden}/${heads} = ${hidden / heads} must be even (rotary embeddings)`);
    if (heads % kvHeads !== 0) problems.push(`--heads ${heads} is not divisible by --kv-heads ${kvHeads}`);
    if (config.attention === "ulysses" && heads < sp) problems.push(`--heads ${heads} is smaller than --sp ${sp}: Ulysses gives every rank at least one attention head`);
    if (seq < sp) problems.push(`--seq ${seq} is too short for --sp ${sp}: every rank needs at least one token`);
    if (config.task === "recall") {
      try {
        recallVocabulary(config.vocab);
        if (config.queries > config.pairs) problems.push(`--queries ${config.queries} must not exceed --pairs ${config.pairs}`);
        if (seq < recallMinSeq(config.pairs, config.queries)) {
          problems.push(`--seq ${seq} is too short for the recall task with ${config.pairs} pairs and ${config.queries} queries (needs at least ${recallMinSeq(config.pairs, config.queries)})`);
        }
      } catch (error) {
        problems.push((error as Error).message);
      }
    } else if (config.data === null) {
      problems.push("--task text needs --data <file>");
    } else {
      try {
        ByteTextData.check(config.data, seq);
      } catch (error) {
        problems.push((error as Error).message);
      }
    }
    const world = launcherWorldSize(env);
    if (config.backend === "mpi" && world !== null && world !== sp * dp) {
      problems.push(`--sp ${sp} x --dp ${dp} = ${sp * dp} ranks, but mpirun started ${world}`);
    }
  }
  if (config.resume !== null && !fs.existsSync(config.resume)) problems.push(`--resume '${config.resume}' does not exist`);
  if (problems.length > 0) throw new TrainerError(`invalid configuration:\n  - ${problems.join("\n  - ")}`);
}

/** camelCase -> kebab-case (flag names). */
export function kebab(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

/** kebab-case -> camelCase (config keys). */
export function camel(key: string): string {
  return key.replace(/-([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}
