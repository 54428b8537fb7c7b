/**
 * Validation of a run configuration: every flag's value against its own
 * rules, the parallel layout's rules (in flag names, from the scheme
 * registry), the task's and the model package's own bounds, and the
 * launcher's world, before any rank starts. One message lists every problem.
 */
import { launcherWorldSize } from "@ulysses/collectives";
import fs from "node:fs";
import os from "node:os";
import { checkWeights, mlpNames, validateGptConfig } from "@ulysses/model";
import { fusedAttentionStatus } from "@ulysses/native-ops";
import { findSequenceParallelScheme, parallelDimsProblems } from "@ulysses/parallel";
import { BYTE_VOCAB, ZERO_STAGES, validateRecallTask, fileProblem } from "@ulysses/training";
import {
  BACKENDS,
  DEFAULTS,
  MODEL_SHAPE_KEYS,
  MAX_THREADS_PER_CORE,
  MAX_TIMEOUT_S,
  MAX_WEIGHT_DECAY,
  MIN_TIMEOUT_S,
  isModulePath,
  kebab,
  parallelOptionsOf,
  recallOptionsOf,
  vocabOf,
  type TrainConfig,
} from "./config.js";
import { documentFlagProblems, textDataProblems } from "./data-config.js";
import { TrainerError } from "./errors.js";
import { headGroupsOf, headSplit } from "./plan.js";
import { hfFlagProblems, hfModelOf, tokenizerOf, usesHfModel, type HfModel } from "./hf-model.js";

/**
 * Checks a configuration before any rank starts; throws a TrainerError
 * listing every problem with the offending values.
 */
export function validateConfig(config: TrainConfig, env: NodeJS.ProcessEnv = process.env): void {
  const problems: string[] = [];
  const positive = (key: keyof TrainConfig) => {
    const value = config[key];
    if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1)
      problems.push(`--${kebab(key)} must be a positive integer, got ${String(value)}`);
  };
  for (const key of ["sp", "dp", "seq", "layers", "hidden", "heads", "kvHeads", "batch", "logEvery", "keys", "values", "ulyssesHeadGroups"] as const)
    positive(key);
  // 0: no training, the model as built (or imported) exported and checkpointed
  if (!Number.isSafeInteger(config.steps) || config.steps < 0)
    problems.push(`--steps must be 0 (export the model as loaded) or a positive integer, got ${String(config.steps)}`);
  if (!Number.isSafeInteger(config.checkpointEvery) || config.checkpointEvery < 0)
    problems.push(`--checkpoint-every must be 0 (only at the end) or a positive integer, got ${config.checkpointEvery}`);
  for (const key of ["tileMlp", "tileLoss"] as const) {
    const value = config[key];
    if (value !== "auto" && (!Number.isSafeInteger(value) || value < 0))
      problems.push(`--${kebab(key)} must be 0 (off), auto or a positive number of rows per tile, got ${String(value)}`);
  }
  if (config.tileAttention !== "auto" && (!Number.isSafeInteger(config.tileAttention) || config.tileAttention < 1))
    problems.push(`--tile-attention must be 1 (off), auto or a positive number of head groups, got ${String(config.tileAttention)}`);
  if (!Number.isSafeInteger(config.warmup) || config.warmup < 0) problems.push(`--warmup must be a non-negative integer, got ${config.warmup}`);
  if (!Number.isSafeInteger(config.seed) || config.seed < 0) problems.push(`--seed must be an integer in [0, 2^53 - 1], got ${config.seed}`);
  for (const key of ["lr", "minLr", "weightDecay", "gradClip", "mlpRatio"] as const) {
    if (!(typeof config[key] === "number" && Number.isFinite(config[key]) && config[key] >= 0))
      problems.push(`--${kebab(key)} must be a non-negative number, got ${String(config[key])}`);
  }
  if (!(config.lr > 0)) problems.push(`--lr must be positive, got ${config.lr}`);
  if (!(config.mlpRatio > 0)) problems.push(`--mlp-ratio must be positive, got ${config.mlpRatio}`);
  if (config.minLr > config.lr) problems.push(`--min-lr ${config.minLr} is above --lr ${config.lr}: the cosine decay ends at --min-lr, at most --lr`);
  if (config.weightDecay > MAX_WEIGHT_DECAY)
    problems.push(
      `--weight-decay ${config.weightDecay} is above ${MAX_WEIGHT_DECAY}: AdamW's decoupled decay scales each matrix by 1 - lr x decay a step, so a larger value is no longer a decay`,
    );
  const maxThreads = MAX_THREADS_PER_CORE * os.availableParallelism();
  if (config.threads !== null && (!Number.isSafeInteger(config.threads) || config.threads < 1 || config.threads > maxThreads))
    problems.push(
      `--threads must be an integer from 1 to ${maxThreads} (${MAX_THREADS_PER_CORE} x this machine's ${os.availableParallelism()} cores), got ${config.threads}`,
    );
  if (!(ZERO_STAGES as readonly number[]).includes(config.zero))
    problems.push(`--zero must be ${ZERO_STAGES.join(", ")} (the ZeRO stage), got ${String(config.zero)}`);
  if (config.sharedWeights) {
    if (config.backend !== "threads" && config.backend !== "local")
      problems.push(`--shared-weights needs the threads or local backend (ranks of one process), got --backend ${config.backend}`);
    if (config.zero === 0 || config.zero === 3)
      problems.push(
        `--shared-weights needs --zero 1 or 2: each rank updates its slice of the one whole copy in place, got --zero ${config.zero}${config.zero === 3 ? " (which shards the weights instead: one or the other)" : ""}`,
      );
    const addon = fusedAttentionStatus();
    if (!addon.available) problems.push(`--shared-weights keeps the weights in the native addon's process-wide memory: ${addon.reason}`);
  }
  if (config.precision !== "fp32" && config.precision !== "bf16") problems.push(`--precision must be fp32 or bf16, got '${String(config.precision)}'`);
  else if (config.precision === "bf16" && (config.zero < 2 || config.sp * config.dp < 2))
    problems.push(
      `--precision bf16 stores ZeRO-2's gradient slices in bf16: it needs --zero 2 or 3 over more than one rank (sp x dp > 1), got --zero ${config.zero} over ${config.sp * config.dp}`,
    );
  if (!["recall", "text"].includes(config.task)) problems.push(`--task must be recall or text, got '${config.task}'`);
  if (!mlpNames().includes(config.mlp)) problems.push(`--mlp must be ${mlpNames().join(" or ")}, got '${config.mlp}'`);
  if (!["auto", "fused", "ort"].includes(config.kernel)) problems.push(`--kernel must be auto, fused or ort, got '${config.kernel}'`);
  if (!(BACKENDS as readonly string[]).includes(config.backend) && !isModulePath(config.backend)) {
    problems.push(`unknown backend '${config.backend}': use ${BACKENDS.join(", ")} or a module path (./my-backend.js)`);
  } else if (isModulePath(config.backend)) {
    // only looked at here: the module is imported once every check has passed
    const problem = fileProblem(config.backend);
    if (problem !== null)
      problems.push(`--backend '${config.backend}': ${problem} (a backend module path names a .js or .mjs file that registers a collectives backend)`);
  }
  if (config.task === "text" && config.vocab !== null) {
    problems.push(`--vocab ${String(config.vocab)} is for the recall task; --task text is byte-level (vocab ${BYTE_VOCAB}): drop --vocab`);
  }
  if (config.task === "recall" && config.data !== null) {
    problems.push(`--data '${config.data}' is for --task text; the recall task reads no data file (drop --data or --task recall)`);
  }
  problems.push(...documentFlagProblems(config), ...hfFlagProblems(config));
  const hf = problems.length === 0 ? hfModelChecked(config, problems) : null;
  if (problems.length === 0) {
    const { sp, dp, seq } = config;
    const { hidden, heads, kvHeads } = hf?.model ?? config;
    if (hf === null) {
      if (hidden % heads !== 0) problems.push(`--hidden ${hidden} is not divisible by --heads ${heads}`);
      else if ((hidden / heads) % 2 !== 0)
        problems.push(`head dimension hidden/heads = ${hidden}/${heads} = ${hidden / heads} must be even (rotary embeddings)`);
      if (heads % kvHeads !== 0) problems.push(`--heads ${heads} is not divisible by --kv-heads ${kvHeads}`);
    }
    // the layout's own checks (heads per rank, hybrid degrees, layout, tokens per rank), in flag names
    if (!["auto", "contiguous", "zigzag"].includes(config.sequenceLayout))
      problems.push(`--sequence-layout must be auto, contiguous or zigzag, got '${config.sequenceLayout}'`);
    else
      problems.push(
        ...parallelDimsProblems(
          parallelOptionsOf(config),
          { worldSize: sp * dp, heads, kvHeads, seqLength: seq },
          {
            sp: "--sp",
            dp: "--dp",
            heads: hf === null ? "--heads" : `num_attention_heads of '${hf.configFile}'`,
            seqLength: "--seq",
            attention: "--attention",
            ulyssesDegree: "--ulysses-degree",
            ringDegree: "--ring-degree",
            layout: "--sequence-layout",
            pipelineChunks: "--ulysses-head-groups",
          },
        ),
      );
    const groupProblems = tileAttentionProblems(
      config,
      heads,
      kvHeads,
      hf === null ? ["--heads ", "--kv-heads "] : ["num_attention_heads ", "num_key_value_heads "],
    );
    problems.push(...groupProblems);
    if (groupProblems.length === 0) problems.push(...keepAttentionOutputsProblems(config));
    const mlpWidth = hidden * config.mlpRatio;
    if (hf === null && !Number.isSafeInteger(mlpWidth))
      problems.push(`MLP width --hidden ${hidden} x --mlp-ratio ${config.mlpRatio} = ${mlpWidth} must be a whole number`);
    if (config.task === "recall") {
      try {
        validateRecallTask(recallOptionsOf(config));
      } catch (error) {
        // the task's message in flag names
        problems.push((error as Error).message.replace(/^recall task: (seq|keys|values|vocab) /, "--$1 "));
      }
    } else if (config.data === null) {
      problems.push("--task text needs --data <file>");
    } else {
      problems.push(...textDataProblems(config));
    }
    if (problems.length === 0 && hf !== null) {
      try {
        validateGptConfig(hf.model);
      } catch (error) {
        problems.push(`'${hf.configFile}': ${(error as Error).message}`);
      }
    } else if (problems.length === 0) {
      // the model package's own bounds (sizes it refuses to build)
      try {
        validateGptConfig({
          vocab: vocabOf(config),
          hidden,
          heads,
          kvHeads,
          layers: config.layers,
          mlp: config.mlp,
          mlpRatio: config.mlpRatio,
          maxSeq: seq,
          tiedHead: config.tiedHead,
        });
      } catch (error) {
        problems.push((error as Error).message);
      }
    }
    const world = launcherWorldSize(env);
    if (config.backend === "mpi" && world === null) {
      problems.push(
        `--backend mpi runs one process per rank, started by mpirun, and this process was not (no OMPI_COMM_WORLD_SIZE or PMI_SIZE in its environment): run it under mpirun -np ${sp * dp} --bind-to none ulysses-train --backend mpi --out DIR ... (-np = --sp ${sp} x --dp ${dp}), or use --backend threads`,
      );
    } else if (config.backend === "mpi" && world !== sp * dp) {
      problems.push(`--sp ${sp} x --dp ${dp} = ${sp * dp} ranks, but mpirun started ${world}`);
    }
  }
  if (config.resume !== null && !fs.existsSync(config.resume)) problems.push(`--resume '${config.resume}' does not exist`);
  if (typeof config.overwrite !== "boolean") problems.push(`--overwrite is a switch, got ${String(config.overwrite)}`);
  if (!(typeof config.timeout === "number" && config.timeout >= MIN_TIMEOUT_S && config.timeout <= MAX_TIMEOUT_S))
    problems.push(
      `--timeout must be a number of seconds from ${MIN_TIMEOUT_S} to ${MAX_TIMEOUT_S} (about 24 days, the longest timer Node keeps), got ${config.timeout}`,
    );
  if (config.out !== null && config.out.trim() === "") problems.push("--out needs a directory name, got ''");
  if (typeof config.memoryArena !== "boolean" && config.memoryArena !== "auto")
    problems.push(`--memory-arena is on, off (--no-memory-arena) or auto, got ${String(config.memoryArena)}`);
  if (typeof config.skipMemoryCheck !== "boolean") problems.push(`--skip-memory-check is a switch, got ${String(config.skipMemoryCheck)}`);
  if (typeof config.profile !== "boolean") problems.push(`--profile is a switch, got ${String(config.profile)}`);
  if (problems.length > 0) throw new TrainerError(`invalid configuration:\n  - ${problems.join("\n  - ")}`);
}

/** --tile-attention G: G divides the heads and the kv heads, and leaves a Ulysses group a query head per rank. */
function tileAttentionProblems(config: TrainConfig, heads: number, kvHeads: number, [headsLabel, kvLabel]: [string, string]): string[] {
  const groups = config.tileAttention;
  if (groups === 1 || groups === "auto") return [];
  if (heads % groups !== 0 || kvHeads % groups !== 0)
    return [`--tile-attention ${groups} must divide ${headsLabel}${heads} and ${kvLabel}${kvHeads} (each group of heads keeps its kv heads)`];
  const split = headSplit(config);
  if (heads / groups < split)
    return [
      `--tile-attention ${groups} leaves ${heads / groups} heads per group, fewer than the ${split} ranks of a Ulysses group (each needs a query head): use at most ${Math.floor(heads / split)} groups`,
    ];
  return [];
}

/** --keep-attention-outputs: head groups (more than one, as resolved), no checkpointing, a scheme whose attention keeps its output. */
function keepAttentionOutputsProblems(config: TrainConfig): string[] {
  if (!config.keepAttentionOutputs) return [];
  const problems: string[] = [];
  const groups = headGroupsOf(config);
  if (groups === 1)
    problems.push(
      `--keep-attention-outputs keeps the outputs of attention in head groups: it needs --tile-attention with more than one group (--tile-attention ${String(config.tileAttention)} gives 1)`,
    );
  if (config.activationCheckpointing)
    problems.push(
      "--keep-attention-outputs and --activation-checkpointing exclude each other (checkpointing recomputes the whole block, the attention with it)",
    );
  const scheme = findSequenceParallelScheme(config.attention);
  if (scheme !== undefined && scheme.keepsOutputs?.(config.ulyssesHeadGroups) !== true)
    problems.push(
      `--keep-attention-outputs needs an attention that keeps its output for backward: --attention ulysses without --ulysses-head-groups (got --attention ${config.attention}${config.ulyssesHeadGroups === 1 ? "" : ` --ulysses-head-groups ${config.ulyssesHeadGroups}`})`,
    );
  return problems;
}

/**
 * A Hugging Face model's checks (--model, --model-config): its config.json
 * read by its family, the shape flags left out (they come from the file),
 * the text task, and --seq within max_position_embeddings. Problems go into
 * `problems`; the model, or null when there is none or it is unreadable.
 */
function hfModelChecked(config: TrainConfig, problems: string[]): HfModel | null {
  if (!usesHfModel(config)) return null;
  const given = MODEL_SHAPE_KEYS.filter((key) => config[key] !== DEFAULTS[key]);
  if (given.length > 0)
    problems.push(
      `${given.map((key) => `--${kebab(key)} ${String(config[key])}`).join(", ")}: the model's shape comes from its config.json with --model or --model-config (leave these flags out)`,
    );
  if (config.task !== "text") problems.push(`--task ${config.task}: a Hugging Face model trains on text (--task text --data FILE)`);
  if (config.vocab !== null) problems.push(`--vocab ${String(config.vocab)}: the vocabulary comes from the model's config.json (drop --vocab)`);
  let hf: HfModel | null;
  try {
    hf = hfModelOf(config);
  } catch (error) {
    problems.push((error as Error).message);
    return null;
  }
  if (hf === null) return null;
  if (config.seq > hf.model.maxSeq) problems.push(`--seq ${config.seq} is beyond max_position_embeddings ${hf.model.maxSeq} of '${hf.configFile}'`);
  // the tokenizer, and every shard's header and tensor (names, shapes, dtypes) before any rank starts or anything is written
  try {
    tokenizerOf(config);
  } catch (error) {
    problems.push(`${config.tokenizer === null ? "--model" : "--tokenizer"}: ${(error as Error).message}`);
  }
  if (hf.weightsDir !== null) {
    try {
      checkWeights(hf.weightsDir, hf.model, hf.family);
    } catch (error) {
      problems.push(`--model '${hf.weightsDir}': ${(error as Error).message}`);
    }
  }
  return hf;
}
