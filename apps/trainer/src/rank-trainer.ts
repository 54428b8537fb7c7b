import type { ProcessGroup } from "@ulysses/collectives";
import { commDelta, documentPairs } from "@ulysses/measure";
import { OpProfile, type OpTotals } from "@ulysses/kernels";
import { Gpt, importWeights, type GptConfig } from "@ulysses/model";
import { ParallelDims, parallelize, type Batch } from "@ulysses/parallel";
import {
  ByteTextData,
  DocumentData,
  Trainer,
  batchRows,
  corpusDigest,
  learningRateAt,
  inspectCheckpoint,
  recallBatch,
  restoreCheckpointFile,
  saveCheckpoint,
  scoreTokens,
  type CheckpointInfo,
  type TokenScores,
  type ZeroStage,
  type PackedBatch,
} from "@ulysses/training";
import { Rng, type RngState } from "@ulysses/tensors";
import { DATA_STREAM, MODEL_SHAPE_KEYS, checkpointSettings, gptConfigOf, recallOptionsOf, textDataOptions, usesDocuments, type TrainConfig } from "./config.js";
import { TrainerError } from "./errors.js";
import { hfModelOf, usesHfModel } from "./hf-model.js";
import { createRankKernels, type RankKernels } from "@ulysses/native-ops";
import { slowerPathNote } from "./kernels.js";
import { keepsBfloat16, parallelOptionsOfPlan, type RunPlan } from "./plan.js";

export interface RankSetup {
  world: ProcessGroup;
  config: TrainConfig;
  /** The run as the driver planned it: degrees, model, tiles, arena. */
  plan: RunPlan;
  /** ONNX Runtime intra-op threads of this rank. */
  threads: number;
  /** Checkpoint to resume from, or null. */
  resumeFile: string | null;
  /** --shared-weights: the one copy of the weights every rank of this process reads (process-wide memory), else absent. */
  sharedValues?: Float32Array;
}

/** What one rank reports after a step (the driver reads rank 0's). */
export interface RankStepReport {
  step: number;
  loss: number;
  accuracy: number;
  gradNorm: number;
  lr: number;
  stepMs: number;
  commMs: number;
  commBytes: number;
  tokens: number;
  peakRssBytes: number;
  /** Packed documents: distinct documents in the global batch, and its fraction of padding tokens. */
  documents?: number;
  padding?: number;
  /** Packed documents: the (query, key) pairs per head their masked causal attention covers over the global batch (documentPairs). */
  attendedPairs?: number;
  /** Packed documents: bad documents skipped so far (--skip-bad-documents), over the run's stream (kept across a resume). */
  skippedDocuments?: number;
  /** ZeRO-3: the weights this rank holds (its slice) and those it gathers and holds through a step, in elements. */
  weightSlice?: number;
  gatheredWeights?: number;
  /** --profile: this step's calls and milliseconds per op (OpProfile's names), in first-call order. */
  ops?: Record<string, OpTotals>;
}

/**
 * What a rank calls around each step: nothing in a real run. Tests of
 * failure handling install hooks that inject faults there
 * (testing-fixtures/fault-injector.ts, loaded with `node --import`).
 */
export interface RankHooks {
  /** At the start of `step` on world rank `rank`, before its first collective. */
  stepStart?(rank: number, step: number): void;
  /** Once the step's last collective is done; `trainer` holds the step's reduced gradients (tests compare them across runs). */
  stepEnd?(rank: number, step: number, trainer: Trainer): void;
}

let rankHooks: RankHooks = {};
const hookModules: string[] = [];

/**
 * Installs `hooks` for every RankTrainer of this thread. `module` (the
 * installing module's URL) is imported again by each rank the threads
 * backend starts, so that its ranks install the same hooks in their threads.
 */
export function installRankHooks(hooks: RankHooks, module?: string): void {
  rankHooks = hooks;
  if (module !== undefined && !hookModules.includes(module)) hookModules.push(module);
}

/** The modules that installed rank hooks in this thread (for rank threads to import). */
export function rankHookModules(): string[] {
  return [...hookModules];
}

/** Whether a checkpoint's settings record the corpus `config.data` holds now (its SHA-256). */
function sameCorpus(config: TrainConfig, settings: unknown): boolean {
  const recorded = (settings as { dataSha256?: unknown } | null)?.dataSha256;
  return typeof recorded === "string" && config.data !== null && corpusDigest(config.data).sha256 === recorded;
}

/** Throws unless a checkpoint's header describes the model `config` builds (its shape and vocab; maxSeq at least --seq). */
function checkResumedModel(config: TrainConfig, info: CheckpointInfo): void {
  const built = gptConfigOf(config);
  // a Hugging Face model: every field of its config but maxSeq (the flags' GPT: its shape and vocab)
  const keys = usesHfModel(config) ? [...new Set([...Object.keys(built), ...Object.keys(info.config)])].filter((key) => key !== "maxSeq") : [];
  for (const key of [...MODEL_SHAPE_KEYS, "vocab", ...keys] as (keyof GptConfig)[]) {
    if (JSON.stringify(info.config[key]) !== JSON.stringify(built[key]))
      throw new TrainerError(
        `checkpoint '${info.file}': config.${key} ${String(info.config[key])} is not the ${key} ${String(built[key])} of the model this run builds (was the file replaced after it was checked?)`,
      );
  }
  if (info.config.maxSeq < config.seq)
    throw new TrainerError(`checkpoint '${info.file}': config.maxSeq ${info.config.maxSeq} is below --seq ${config.seq}, the sequences this run trains`);
}

export class RankTrainer {
  private constructor(
    readonly config: TrainConfig,
    readonly dims: ParallelDims,
    readonly trainer: Trainer,
    private readonly kernels: RankKernels,
    private readonly dataRng: Rng,
    private readonly text: ByteTextData | null,
    private readonly docs: DocumentData | null,
    private readonly lossTileRows: number,
    private readonly gpt: Gpt,
    private readonly gatherGroup: ProcessGroup | null,
    /** --profile: times every call of the ops and the attention kernel the model and trainer were given. */
    private readonly profile: OpProfile | null,
  ) {}

  static async create(setup: RankSetup): Promise<RankTrainer> {
    const { world, config, plan } = setup;
    // the header only: the tensors are read into the trainer below, only when the file describes the model this run builds (it
    // may have changed since the CLI checked it), and only what this rank holds
    const check = (info: CheckpointInfo) => checkResumedModel(config, info);
    const header = setup.resumeFile === null ? null : inspectCheckpoint(setup.resumeFile);
    if (header !== null) check(header);
    const gptConfig = header?.config ?? plan.model;
    // validated before any group is built: one message naming every value that is off
    const dims = await ParallelDims.create(world, parallelOptionsOfPlan(plan), { heads: gptConfig.heads, kvHeads: gptConfig.kvHeads, seqLength: config.seq });
    const kernels = await createRankKernels(setup.threads, config.kernel, plan.memoryArena);
    const profile = config.profile ? new OpProfile() : null;
    const ops = profile === null ? kernels.ops : profile.wrap("ops", kernels.ops);
    const localAttention = profile === null ? kernels.attention : profile.wrap("attention", kernels.attention);
    const { tiles } = plan;
    // the one-device model, parallelised from outside
    const model = new Gpt(gptConfig, {
      ops,
      localAttention,
      seed: config.seed,
      activationCheckpointing: config.activationCheckpointing,
      bfloat16Checkpoints: keepsBfloat16(config, plan),
      mlpTileRows: tiles.mlp,
      attentionHeadGroups: tiles.attentionHeadGroups,
      keepAttentionOutputs: config.keepAttentionOutputs,
      ...(setup.sharedValues !== undefined ? { parameterValues: setup.sharedValues } : {}),
      // ZeRO-3: this rank's slice of the weights, over the ranks the Trainer sums gradients over (ParallelGpt's gradientGroup, the world)
      ...(config.zero === 3 && dims.world.size > 1 ? { shardOver: { rank: dims.world.rank, ranks: dims.world.size } } : {}),
    });
    // a Hugging Face model directory's weights (--model), unless the checkpoint's replace them
    const hf = hfModelOf(config);
    if (header === null && hf?.weightsDir != null) importWeights(hf.weightsDir, gptConfig, hf.family, model.params);
    const trainer = new Trainer(parallelize(model, dims), {
      ops,
      lossTileRows: tiles.loss,
      gradClip: config.gradClip,
      adamw: { weightDecay: config.weightDecay },
      zero: config.zero as ZeroStage,
      sharedWeights: setup.sharedValues !== undefined,
      sliceGradientDtype: config.precision === "bf16" ? "bfloat16" : "float32",
      // ZeRO-3 over more than one rank: the weights travel in bf16 too (the fp32 slice stays the master)
      weightGatherDtype: config.precision === "bf16" && config.zero === 3 ? "bfloat16" : "float32",
    });
    const dataRng = new Rng(config.seed, DATA_STREAM);
    const checkpoint = setup.resumeFile === null ? null : restoreCheckpointFile(trainer, setup.resumeFile, { check });
    if (checkpoint !== null) dataRng.setState(checkpoint.rng as RngState);
    // one shared copy: every rank wrote the same weights into it (initialised, imported, restored); none reads them before all are done
    if (setup.sharedValues !== undefined) await world.barrier();
    // ZeRO-3: the group the weights are gathered on, made here where every rank is (its bytes count in the steps' from the first)
    const gatherGroup = await trainer.weightGatherGroup();
    // packed documents (JSONL, a folder of .txt, or text split by --doc-separator), else random windows of one byte stream
    const docs = usesDocuments(config) ? new DocumentData(textDataOptions(config)) : null;
    // the stream continues where the checkpoint left it when the corpus is the same (resume notes a different one)
    if (docs !== null && checkpoint?.data !== undefined && sameCorpus(config, checkpoint.settings)) {
      try {
        docs.restore(checkpoint.data);
      } catch (cause) {
        docs.close();
        throw new TrainerError(`checkpoint '${checkpoint.file}': ${(cause as Error).message}`, { cause });
      }
    }
    // no data at all: a rank that only scores (ulysses-generate --score)
    const text = config.task === "text" && docs === null && config.data !== null ? new ByteTextData(config.data, config.seq) : null;
    return new RankTrainer(config, dims, trainer, kernels, dataRng, text, docs, tiles.loss, model, gatherGroup, profile);
  }

  get step(): number {
    return this.trainer.step;
  }

  get description(): string {
    return this.kernels.description + slowerPathNote(this.trainer.model.config, this.kernels.nativeOps);
  }

  /** The global batch (batch x dp sequences), identical on every rank. */
  private globalBatch(): Batch | PackedBatch {
    const { config } = this;
    const rows = config.batch * config.dp;
    const random = () => this.dataRng.uniform();
    if (this.docs !== null) return this.docs.batch(rows, config.seq, random);
    if (this.text !== null) return this.text.batch(rows, config.seq, random);
    if (config.task === "text") throw new TrainerError("a text-task rank without --data cannot train (it was started to score)");
    return recallBatch(recallOptionsOf(config), rows, random);
  }

  async runStep(): Promise<RankStepReport> {
    const { config, dims } = this;
    const { world } = dims;
    const step = this.trainer.step;
    const lr = learningRateAt(step, { peak: config.lr, warmupSteps: config.warmup, totalSteps: config.steps, minLr: config.minLr });
    const global = this.globalBatch();
    // [batch * dp, seq] -> [batch, seq] (this DP group's rows; the model takes this rank's sequence shard)
    const rows: Batch = batchRows(global, dims.dpRank * config.batch, config.batch);
    const groups = dims.spGroup === world ? [world] : [world, dims.spGroup];
    const before = groups.map((g) => g.stats());
    // ZeRO-3's gathers run beside the layers: their bytes count, and of their time what the model waited for them
    const gathersBefore = this.gatherGroup?.stats();
    const waitedBefore = this.gpt.gatherWaitMs;
    this.profile?.take();
    const started = performance.now();
    rankHooks.stepStart?.(world.rank, step);
    const result = await this.trainer.trainStep(rows, lr);
    rankHooks.stepEnd?.(world.rank, step, this.trainer);
    const stepMs = performance.now() - started;
    const delta = commDelta(
      before,
      groups.map((g) => g.stats()),
    );
    const gathered = gathersBefore === undefined ? 0 : commDelta(gathersBefore, this.gatherGroup!.stats()).bytesSent;
    const commMs = delta.timeMs + (this.gpt.gatherWaitMs - waitedBefore);
    const commBytes = delta.bytesSent + gathered;
    return {
      step,
      loss: result.loss,
      accuracy: result.accuracy,
      gradNorm: result.gradNorm,
      lr,
      stepMs,
      commMs,
      commBytes,
      tokens: config.batch * config.dp * config.seq,
      peakRssBytes: process.resourceUsage().maxRSS * 1024,
      ...("stats" in global ? { documents: global.stats.documents, padding: global.stats.padding } : {}),
      ...(global.documents !== undefined ? { attendedPairs: documentPairs(global.documents.ids.data, config.seq) } : {}),
      ...(this.docs !== null ? { skippedDocuments: this.docs.skipped.count } : {}),
      ...(this.gpt.params.sharded ? { weightSlice: this.gpt.params.owned.length, gatheredWeights: this.gpt.gatheredWeightElements } : {}),
      ...(this.profile !== null ? { ops: this.profile.take() } : {}),
    };
  }

  /** Collective; world rank 0 writes `file`. */
  async save(file: string): Promise<void> {
    await saveCheckpoint(
      file,
      this.trainer,
      { rng: this.dataRng.getState(), data: this.docs?.state(), settings: checkpointSettings(this.config) },
      this.dims.world.rank === 0,
    );
  }

  /** Each token's log-probability given the ones before (every rank of the SP group passes the same tokens; no data parallelism). */
  async score(tokens: Int32Array): Promise<TokenScores> {
    if (this.dims.dp !== 1) throw new TrainerError(`scoring runs one sequence on one SP group: --dp must be 1, got ${this.dims.dp}`);
    return scoreTokens(this.trainer.model, this.kernels.ops, tokens, this.lossTileRows > 0 ? this.lossTileRows : 256);
  }

  /** The flat parameter vector (the driver exports it; tests compare it across runs); refused under ZeRO-3, where no rank holds it whole. */
  weights(): Float32Array {
    const { params } = this.trainer.model;
    if (params.sharded) throw new TrainerError("the weights are sharded over the ranks (--zero 3): read them from the checkpoint (checkpointWeights)");
    return params.values;
  }

  async close(): Promise<void> {
    this.docs?.close();
    await this.kernels.release();
  }
}
