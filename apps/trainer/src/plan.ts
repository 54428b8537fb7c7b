/**
 * The run planned once: the flags (a validated TrainConfig) resolved into the
 * plain values every part of the run reads, the parallel layout's degrees,
 * the model's config, the tiles and the arena choice, so that nothing
 * downstream derives them again. The driver makes it after validation and
 * hands it to every rank (it crosses to worker threads as data); under
 * mpirun each process makes the same plan from the same flags.
 */
import { storesBfloat16, type GptConfig } from "@ulysses/model";
import { findSequenceParallelScheme, resolveDims, sequenceParallelScheme, type ParallelDimsOptions, type SequenceLayoutKind } from "@ulysses/parallel";
import { gptConfigOf, parallelOptionsOf, tileRowsOf, tokensPerRankOf, type TrainConfig } from "./config.js";

export interface RunPlan {
  /** The model the ranks build (a resumed run's comes from its checkpoint). */
  model: GptConfig;
  /** The sequence-parallel scheme's registered name. */
  scheme: string;
  sp: number;
  dp: number;
  /** Ranks of each Ulysses group (u) and groups around the ring (r), u x r = sp. */
  ulyssesDegree: number;
  ringDegree: number;
  layout: SequenceLayoutKind;
  /** Ulysses' exchanges pipelined in this many chunks of heads (1: off; --ulysses-head-groups). */
  pipelineChunks: number;
  /** Rows per tile of each block's MLP and of the LM head and loss (0: untiled), and the attention's head groups (1: off). */
  tiles: { mlp: number; loss: number; attentionHeadGroups: number };
  /** Tokens each rank holds per step (batch x its shard of the sequence). */
  tokensPerRank: number;
  /** ONNX Runtime's arenas and glibc's heap kept (true) or freed memory returned to the OS (false). */
  memoryArena: boolean;
}

/** The plan of a validated configuration; `model` on resume (default: the one the flags describe), `memoryArena` once decided. */
export function planRun(config: TrainConfig, options: { model?: GptConfig; memoryArena?: boolean } = {}): RunPlan {
  const model = options.model ?? gptConfigOf(config);
  const dims = resolveDims(parallelOptionsOf(config), model.kvHeads ?? model.heads);
  const tiles = tileRowsOf(config);
  return {
    model,
    scheme: dims.attention,
    sp: config.sp,
    dp: config.dp,
    ulyssesDegree: dims.ulyssesDegree,
    ringDegree: dims.ringDegree,
    layout: dims.layout,
    pipelineChunks: config.ulyssesHeadGroups,
    tiles: { mlp: tiles.mlp, loss: tiles.loss, attentionHeadGroups: headGroupsOf(config, sequenceParallelScheme(dims.attention).headRanks(dims)) },
    tokensPerRank: tokensPerRankOf(config),
    memoryArena: options.memoryArena ?? config.memoryArena === true,
  };
}

/** Ranks that split a head group's heads: the Ulysses degree (plain or hybrid), 1 for ring and all-gather-KV (every rank runs every head). */
export function headSplit(config: TrainConfig): number {
  const scheme = findSequenceParallelScheme(config.attention);
  return scheme === undefined ? 1 : scheme.headRanks(resolveDims(parallelOptionsOf(config), gptConfigOf(config).kvHeads));
}

/**
 * Head groups of every block's attention half (1: all heads at once). A
 * number is taken as given; auto is the most groups the layout allows: the
 * largest G that divides the model's heads and kv heads and leaves each rank of a
 * Ulysses group a query head (8 heads: 8 groups at SP 1, 4 at SP 2).
 */
export function headGroupsOf(config: TrainConfig, split = headSplit(config)): number {
  if (config.tileAttention !== "auto") return config.tileAttention;
  const { heads, kvHeads } = gptConfigOf(config);
  for (let groups = kvHeads; groups > 1; groups--) if (heads % groups === 0 && kvHeads % groups === 0 && heads / groups >= split) return groups;
  return 1;
}

/** ParallelDims' options of a plan: every degree explicit, so ParallelDims resolves nothing again. */
export function parallelOptionsOfPlan(plan: RunPlan): ParallelDimsOptions {
  const options: ParallelDimsOptions = { sp: plan.sp, dp: plan.dp, attention: plan.scheme, layout: plan.layout };
  const { settings } = sequenceParallelScheme(plan.scheme);
  if (settings.includes("ulyssesDegree")) options.ulyssesDegree = plan.ulyssesDegree;
  if (settings.includes("ringDegree")) options.ringDegree = plan.ringDegree;
  if (plan.pipelineChunks !== 1) options.pipelineChunks = plan.pipelineChunks;
  return options;
}

/**
 * `--precision bf16`: whether the blocks keep what they keep for backward in bf16 (GptOptions.bfloat16Checkpoints): with
 * activation checkpointing (each block's input), or with attention in head groups and a tiled MLP (each block's input and
 * the MLP's input); any other block keeps its activations in float32.
 */
export function keepsBfloat16(config: TrainConfig, plan: RunPlan): boolean {
  const { attentionHeadGroups, mlp } = plan.tiles;
  return config.precision === "bf16" && storesBfloat16({ activationCheckpointing: config.activationCheckpointing, attentionHeadGroups, mlpTileRows: mlp });
}
