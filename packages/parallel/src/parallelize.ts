/**
 * Sequence parallelism applied from outside, in torchtitan's manner: the
 * model and its blocks stay one-device code; `parallelize(model, dims)`
 * replaces the attention of every layer with a sharded one (Ulysses,
 * all-gather-KV or ring over the SP group), and the returned ParallelGpt cuts each
 * batch into this rank's sequence shard and hands the model the shard's
 * positions. Weight gradients stay per rank in the model's flat gradient;
 * they are summed over `gradientGroup` (every rank: SP ranks hold parts of
 * one sequence, DP ranks other sequences) by the training step, which can
 * then reduce-scatter them for ZeRO-1. `ParallelBlock` does the same for one
 * block (its gradients summed over its group unless told not to).
 *
 * The sharded attention needs the global shard sizes, which a rank cannot
 * infer from its own tokens (1000 over 3 ranks: is 333 tokens of 999 or of
 * 1000?). The wrapper hands them, with the whole sequence's document ids,
 * to the model's forward as its `attentionRun`; each block passes it to its
 * attention (and keeps it for a recompute in backward), where the adapter
 * reads it. Nothing is held between calls.
 *
 * A tiled loss runs `forward(..., { logits: false })` (no logits), the head
 * a tile at a time through `lmHead()`, and `backwardFromHidden`.
 */
import {
  LocalBlockAttention,
  type BlockAttention,
  type BlockAttentionOptions,
  type BlockAttentionContext,
  type KeptAttention,
  type BlockBackwardOptions,
  type BlockContext,
  type BlockForwardOptions,
  type BlockGradients,
  type TransformerBlock,
} from "@ulysses/block";
import type { ProcessGroup } from "@ulysses/collectives";
import type { AttentionGradients, LocalAttention } from "@ulysses/kernels";
import type { CausalLM, CausalLMForward, Gpt, GptConfig, GptContext, GptForwardOptions, GptHead, LMBatch, ParameterStore } from "@ulysses/model";
import { Tensor } from "@ulysses/tensors";
import { ParallelError } from "./errors.js";
import type { HybridGroups, ParallelDims, SequenceParallelKind } from "./parallel-dims.js";
import { sequenceParallelScheme } from "./scheme-registry.js";
import { runPositions, sequenceShards, type SequenceOptions, type SequenceShards } from "./sequence-shards.js";
import { shardBatch, type Batch, type BatchShard } from "./shard-batch.js";
import { documentRuns, documentSlice, type ShardedAttention, type ShardedAttentionOptions } from "./sharded-attention.js";

type F32 = Tensor<"float32">;
type I32 = Tensor<"int32">;

/** The sequence-parallel wrapper of the registered scheme `kind` around a local attention kernel, on `group` (hybrid: with its subgroups, `ParallelDims.hybridGroups`). */
export function createShardedAttention(
  kind: SequenceParallelKind,
  local: LocalAttention,
  group: ProcessGroup,
  hybrid: HybridGroups | null = null,
  pipelineChunks = 1,
): ShardedAttention {
  const scheme = sequenceParallelScheme(kind);
  const degrees = hybrid === null ? { ulyssesDegree: group.size, ringDegree: 1 } : { ulyssesDegree: hybrid.ulysses.size, ringDegree: hybrid.ring.size };
  return scheme.create(local, { group, groups: hybrid === null ? {} : { ...hybrid }, degrees, pipelineChunks });
}

/** The layout one forward ran with (kept for its backward). */
export interface RunLayout {
  shards: SequenceShards;
  /** Every token's document id in the whole sequence, [b * N] (packed documents only). */
  documents?: Int32Array;
}

/** Sequence options of a sharded forward, with packed documents. */
export interface ParallelSequenceOptions extends SequenceOptions {
  /** Packed documents: every token's document id in the whole sequence, int32 [b * N], non-decreasing per row. */
  sequenceDocuments?: Int32Array;
  /** RoPE positions of this rank's tokens, int32 [b * s_r] (default: their global positions). */
  positions?: Int32Array;
}

/** A ShardedAttention seen as the block's BlockAttention: the shard sizes come with each call, as its run (the forward's attentionRun). */
class LayoutAttention implements BlockAttention {
  readonly name: string;
  /** The sharded attention's, where it has them (else absent: a block's keepAttentionOutputs is refused by name). */
  readonly keepOutput?: (context: BlockAttentionContext) => KeptAttention;
  readonly restore?: (kept: KeptAttention, q: F32, k: F32, v: F32, out: F32) => Promise<BlockAttentionContext>;

  constructor(readonly sharded: ShardedAttention) {
    this.name = sharded.name;
    const { keepOutput, restore } = sharded;
    if (keepOutput !== undefined && restore !== undefined) {
      this.keepOutput = (context) => keepOutput.call(sharded, context);
      this.restore = (kept, q, k, v, out) => restore.call(sharded, kept, q, k, v, out);
    }
  }

  forward(q: F32, k: F32, v: F32, options: BlockAttentionOptions) {
    const run = options.run as RunLayout | undefined;
    if (run === undefined || run.shards === undefined)
      throw new ParallelError(`${this.name}: called outside a parallel forward (run the block through ParallelBlock or the model through parallelize)`);
    // the block's own documents are this rank's tokens only; the sharded attention takes the whole sequence's
    const sharded: ShardedAttentionOptions = { causal: options.causal, scale: options.scale, seqRuns: run.shards.runs };
    if (run.documents !== undefined) sharded.sequenceDocuments = run.documents;
    return this.sharded.forward(q, k, v, sharded);
  }

  backward(context: BlockAttentionContext, dOut: F32): Promise<AttentionGradients> {
    return this.sharded.backward(context, dOut);
  }

  release(context: BlockAttentionContext, ...tensors: F32[]): void {
    this.sharded.release(context, ...tensors);
  }
}

/** The local kernel a block runs before parallelisation. */
function localKernelOf(block: TransformerBlock, who: string): LocalAttention {
  if (!(block.attention instanceof LocalBlockAttention))
    throw new ParallelError(`${who}: the block's attention is ${block.attention.name}, not a one-device LocalBlockAttention (parallelised already?)`);
  return block.attention.local;
}

/** Swaps the attention of `blocks` (sharing one sharded wrapper per local kernel); returns the wrappers. */
function shardBlocks(blocks: readonly TransformerBlock[], create: (local: LocalAttention) => ShardedAttention, who: string): ShardedAttention[] {
  const byKernel = new Map<LocalAttention, LayoutAttention>();
  for (const block of blocks) {
    const local = localKernelOf(block, who);
    let attention = byKernel.get(local);
    if (attention === undefined) {
      const sharded = create(local);
      sharded.checkHeads(block.config.heads, block.config.kvHeads);
      attention = new LayoutAttention(sharded);
      byKernel.set(local, attention);
    }
    block.attention = attention;
  }
  return [...byKernel.values()].map((a) => a.sharded);
}

/** What ParallelBlock.forward keeps: the block's context and the shard layout. */
export interface ParallelBlockContext extends RunLayout {
  block: BlockContext;
}

/** One TransformerBlock, sequence-parallel over `group`. */
export class ParallelBlock {
  readonly attention: ShardedAttention;

  /** `attention`: the kind of wrapper to build, or an existing wrapper to share (its buffers serve one call at a time). */
  constructor(
    readonly block: TransformerBlock,
    readonly group: ProcessGroup,
    attention: SequenceParallelKind | ShardedAttention = "ulysses",
  ) {
    if (typeof attention === "string") {
      this.attention = shardBlocks([block], (local) => createShardedAttention(attention, local, group), "ParallelBlock")[0]!;
    } else {
      if (attention.group !== group) throw new ParallelError(`ParallelBlock: attention ${attention.name} runs on another group than the block`);
      localKernelOf(block, "ParallelBlock");
      attention.checkHeads(block.config.heads, block.config.kvHeads);
      this.attention = attention;
      block.attention = new LayoutAttention(attention);
    }
  }

  /** x [b, s_r, hidden]: this rank's shard of the sequence (sizes from `sequence`, default equal shards). */
  async forward(x: F32, sequence: ParallelSequenceOptions = {}): Promise<{ y: F32; context: ParallelBlockContext }> {
    const [b, s] = x.shape as [number, number, number];
    const run = runLayout(s, b, this.group, sequence, "ParallelBlock.forward");
    const options: BlockForwardOptions = { positions: sequence.positions ?? shardPositions(run.shards, this.group.rank, b), attentionRun: run };
    if (run.documents !== undefined)
      options.documents = documentRuns(run.documents, b, run.shards.length, run.shards.runs[this.group.rank]!, "ParallelBlock.forward")!;
    const { y, context } = await this.block.forward(x, options);
    return { y, context: { ...run, block: context } };
  }

  /** dy [b, s_r, hidden] -> dx and the weight gradients, summed over the group unless `reduceGradients` is false. */
  async backward(context: ParallelBlockContext, dy: F32, options: { reduceGradients?: boolean } & BlockBackwardOptions = {}): Promise<BlockGradients> {
    const g = await this.block.backward(context.block, dy, { overwriteDy: options.overwriteDy ?? false });
    if (options.reduceGradients ?? true) await this.group.allReduce(new Tensor("float32", [g.flat.length], g.flat), { op: "sum" });
    return g;
  }

  release(context: ParallelBlockContext): void {
    this.block.release(context.block);
  }
}

/** RoPE positions of a rank's tokens: its first position when it holds one run, else every token's, int32 [b * s_r]. */
function shardPositions(shards: SequenceShards, rank: number, batch: number): number | Int32Array {
  const runs = shards.runs[rank]!;
  return runs.length === 1 ? runs[0]!.start : runPositions(runs, batch);
}

/** GptContext with the shard layout it ran on. */
export interface ParallelGptContext extends GptContext, RunLayout {}

/** Options of ParallelGpt.forward: the sequence, and `logits: false` to stop at the final norm (GptForwardOptions.logits). */
type ParallelForwardOptions = ParallelSequenceOptions & { seqLength: number; logits?: boolean };

/** The shards of a forward on `localLength` tokens per row, checked (before any communication). */
function runLayout(localLength: number, batch: number, group: ProcessGroup, sequence: ParallelSequenceOptions, who: string): RunLayout {
  const shards = sequenceShards(localLength, group.rank, group.size, sequence);
  const ids = sequence.sequenceDocuments;
  if (ids === undefined) return { shards };
  documentSlice(ids, batch, shards.length, 0, shards.length, who);
  return { shards, documents: ids };
}

/** A Gpt whose layers run sequence-parallel over `dims.spGroup`. */
export class ParallelGpt implements CausalLM<ParallelGptContext> {
  readonly attention: readonly ShardedAttention[];

  constructor(
    readonly model: Gpt,
    readonly dims: ParallelDims,
  ) {
    this.attention = shardBlocks(model.blocks, (local) => dims.createAttention(local), "parallelize");
  }

  get config(): GptConfig {
    return this.model.config;
  }

  get params(): ParameterStore {
    return this.model.params;
  }

  /** Every rank holding a replica of the weights: gradients and the loss are summed over it. */
  get gradientGroup(): ProcessGroup {
    return this.dims.world;
  }

  /** This rank's sequence shard of this DP replica's rows (whole sequences, [batch, N]). */
  shard(batch: Batch): BatchShard {
    const { spGroup } = this.dims;
    return shardBatch(batch, spGroup.rank, spGroup.size, this.dims.runs(batch.tokens.shape[1]!));
  }

  /**
   * tokens [b, s_r]: this rank's shard of sequences of `seqLength` tokens
   * (packed documents: `sequenceDocuments`, `positions`); `logits: false`
   * stops at the final norm (context.hFinal, no logits).
   */
  forward(tokens: I32, sequence: ParallelForwardOptions & { logits?: true }): Promise<ParallelGptContext & { logits: F32 }>;
  forward(tokens: I32, sequence: ParallelForwardOptions): Promise<ParallelGptContext>;
  async forward(tokens: I32, sequence: ParallelForwardOptions): Promise<ParallelGptContext> {
    const { spGroup } = this.dims;
    if (sequence.seqLength > this.config.maxSeq)
      throw new ParallelError(`ParallelGpt.forward: a sequence of ${sequence.seqLength} tokens exceeds maxSeq ${this.config.maxSeq}`);
    const [b, s] = tokens.shape as [number, number];
    const laid = sequence.seqRuns !== undefined || sequence.seqSizes !== undefined ? sequence : { ...sequence, seqRuns: this.dims.runs(sequence.seqLength) };
    const run = runLayout(s, b, spGroup, laid, "ParallelGpt.forward");
    const options: GptForwardOptions = {
      positions: sequence.positions ?? shardPositions(run.shards, spGroup.rank, b),
      logits: sequence.logits ?? true,
      attentionRun: run,
    };
    if (run.documents !== undefined)
      options.documents = documentRuns(run.documents, b, run.shards.length, run.shards.runs[spGroup.rank]!, "ParallelGpt.forward")!;
    const context = await this.model.forward(tokens, options);
    return Object.assign(context, run);
  }

  /** forward on this rank's shard of a batch (`shard(batch)`), with its documents when there are; `logits: false` as in forward. */
  forwardShard(shard: BatchShard, options?: { logits?: true }): Promise<ParallelGptContext & { logits: F32 }>;
  forwardShard(shard: BatchShard, options: { logits?: boolean }): Promise<ParallelGptContext>;
  forwardShard(shard: BatchShard, options: { logits?: boolean } = {}): Promise<ParallelGptContext> {
    const sequence: ParallelForwardOptions = { seqLength: shard.seqLength, seqRuns: shard.runs, logits: options.logits ?? true };
    if (shard.documents !== undefined) sequence.sequenceDocuments = shard.documents.sequenceIds.data;
    if (shard.positions !== undefined) sequence.positions = shard.positions.data;
    return this.forward(shard.tokens, sequence);
  }

  /** This rank's shard of `batch` through the model (CausalLM): the shard's labels with its context. */
  async forwardBatch(batch: LMBatch, options: { logits: boolean }): Promise<CausalLMForward<ParallelGptContext>> {
    const shard = this.shard(batch);
    const context = await this.forwardShard(shard, { logits: options.logits });
    return { context, labels: shard.labels.reshape([shard.labels.size]) };
  }

  /** The LM head, a tile of rows at a time (Gpt.lmHead; no communication). */
  lmHead(): GptHead {
    return this.model.lmHead();
  }

  /** Backpropagates dLogits [b * s_r, vocab]; adds this rank's (unreduced) weight gradients into params.grads. Spends the context. */
  backward(context: ParallelGptContext, dLogits: F32): Promise<void> {
    return this.model.headBackward(context, dLogits).then((dh) => this.backwardFromHidden(context, dh));
  }

  /** Backpropagates dhFinal [b * s_r, hidden] (Gpt.backwardFromHidden); adds this rank's (unreduced) weight gradients except the head's. */
  backwardFromHidden(context: ParallelGptContext, dhFinal: F32): Promise<void> {
    // not async: no frame of this call keeps dhFinal alive while the blocks run (a checkpointed block's recompute finds the
    // shard layout in its own context, BlockForwardOptions.attentionRun)
    return this.model.backwardFromHidden(context, dhFinal);
  }

  release(context: ParallelGptContext): void {
    this.model.release(context);
  }
}

/** Applies the layout of `dims` to a one-device model (collective-free; the groups exist already). */
export function parallelize(model: Gpt, dims: ParallelDims): ParallelGpt {
  return new ParallelGpt(model, dims);
}
