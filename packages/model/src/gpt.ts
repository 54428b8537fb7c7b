/**
 * The GPT as plain one-device model code: token embedding, L pre-norm
 * TransformerBlocks, a final norm and the LM head (optionally tied to the
 * embedding). Its forward is `gptForward` (gpt-forward.ts) run on tensors;
 * positions are an input (`positions`: the first token's, or every token's
 * when documents are packed), and so are the documents of packed sequences
 * (`documents`: attention never crosses one). The model never communicates: sequence parallelism
 * (`parallelize` of @ulysses/parallel) swaps each block's attention and
 * shards the input from outside. Weight gradients are accumulated into the
 * flat gradient of the ParameterStore; summing, clipping and the optimizer
 * step belong to @ulysses/training.
 *
 * Memory: `forward(tokens, { logits: false })` stops at the final norm, so a
 * tiled loss can apply the head (`lmHead()`) a tile of rows at a time and
 * continue with `backwardFromHidden`; backward drops each block's context as
 * soon as that block is done, and the context is spent afterwards.
 *
 * Sharded weights (ZeRO-3, `shardOver`): the parameter store holds one rank's
 * slice, and the model gathers what it reads just before it reads it
 * (GptWeights: two staging buffers for the layers, the final norm's at the
 * forward's start, the embedding for its lookup, the head for the loss).
 */
import {
  type BlockContext,
  LocalBlockAttention,
  TransformerBlock,
  blockWeightSpecs,
  normComponent,
  type NormComponent,
  type NormTensors,
} from "@ulysses/block";
import type { BlockOps } from "@ulysses/kernels";
import type { Tensor } from "@ulysses/tensors";
import type { CausalLM, CausalLMForward, LMBatch } from "./causal-lm.js";
import { ModelError } from "./errors.js";
import { gptHead, validHeadColumns, type GptHead, type GptHeadOptions } from "./gpt-head.js";
import { storesBfloat16, type GptForwardOptions, type GptOptions } from "./gpt-options.js";

export { storesBfloat16, type GptForwardOptions, type GptOptions } from "./gpt-options.js";
export { HEAD_GRADIENT_BLOCK_BYTES, headGradientColumns, type GptHead, type GptHeadOptions } from "./gpt-head.js";
import { gptForward, gptHidden, type GptMath } from "./gpt-forward.js";
import { blockConfigOf, gptParamSpecs, validateGptConfig, type GptConfig } from "./gpt-config.js";
import { GptWeights } from "./gpt-weights.js";
import { ParameterStore } from "./parameters.js";

type F32 = Tensor<"float32">;
type I32 = Tensor<"int32">;

/** What forward keeps for backward. Backward spends it: it empties `blocks` and drops the tensors below. */
export interface GptContext {
  /** [rows] token ids, rows = b * s */
  ids: I32;
  batch: number;
  seqLength: number;
  /** One per layer; backward pops each as soon as its block's backward is done. */
  blocks: BlockContext[];
  /** Final-norm input [rows, hidden] and what the norm saved (dropped by backwardFromHidden). */
  xFinal?: F32;
  normSaved?: NormTensors;
  /** The final norm's output, the LM head's input [rows, hidden] (dropped once the head's backward ran). */
  hFinal?: F32;
  /** [rows, vocab]; absent after `forward(tokens, { logits: false })`, dropped by backward (and by the loss once dLogits exist). */
  logits?: F32;
}

/** The context of a forward that computed logits (the default). */
export type GptLogitsContext = GptContext & { logits: F32 };

export class Gpt implements CausalLM<GptContext> {
  readonly config: GptConfig;
  readonly params: ParameterStore;
  /** The final norm (the blocks' norm), chosen once. */
  readonly finalNorm: NormComponent;
  /** Where the layers, the final norm, the embedding and the head read their weights (gathered first when the store is sharded). */
  private readonly weights: GptWeights;
  /** One device: nothing to sum over. */
  readonly gradientGroup = null;
  readonly blocks: TransformerBlock[];
  private readonly ops: BlockOps;
  /** GptOptions.headGradientColumns (undefined: headGradientColumns per call). */
  private readonly headColumns: number | undefined;
  /** GptOptions.bfloat16Checkpoints. */
  private readonly bfloat16Checkpoints: boolean;

  constructor(config: GptConfig, options: GptOptions) {
    validateGptConfig(config);
    this.config = config;
    this.ops = options.ops;
    this.headColumns = validHeadColumns("Gpt", "headGradientColumns", options.headGradientColumns);
    this.bfloat16Checkpoints = options.bfloat16Checkpoints ?? false;
    if (this.bfloat16Checkpoints && !storesBfloat16(options))
      throw new ModelError(
        "Gpt: bfloat16Checkpoints keeps the block inputs of activation checkpointing (or, with attention in head groups and a tiled MLP, the inputs and the MLP's inputs) in bf16: it needs activationCheckpointing, or attentionHeadGroups > 1 with mlpTileRows > 0",
      );
    if (options.parameterValues !== undefined && options.shardOver !== undefined)
      throw new ModelError("Gpt: parameterValues (one shared copy of the weights) and shardOver (a slice per rank) exclude each other");
    this.params = new ParameterStore(gptParamSpecs(config), {
      ...(options.parameterValues === undefined ? {} : { values: options.parameterValues }),
      ...(options.shardOver === undefined ? {} : { shard: options.shardOver }),
    });
    this.params.initialise(options.seed);
    this.finalNorm = normComponent(blockConfigOf(config).norm);
    this.weights = new GptWeights(this.params, config, this.finalNorm);
    const blockConfig = blockConfigOf(config);
    let attention = options.attention;
    if (attention === undefined) {
      if (options.localAttention === undefined) throw new ModelError("Gpt: give `localAttention` (a kernel) or `attention` (a BlockAttention)");
      attention = new LocalBlockAttention(options.localAttention);
    }
    this.blocks = [];
    for (let layer = 0; layer < config.layers; layer++) {
      this.blocks.push(
        new TransformerBlock(blockConfig, {
          ops: options.ops,
          attention,
          weights: this.weights.block(layer, blockConfig),
          checkpoint: options.activationCheckpointing ?? false,
          mlpTileRows: options.mlpTileRows,
          attentionHeadGroups: options.attentionHeadGroups,
          keepAttentionOutputs: options.keepAttentionOutputs,
        }),
      );
    }
  }

  /** The final norm's weights by suffix (gamma, beta), resolved once in the constructor. */
  private finalNormWeights(): NormTensors {
    return this.weights.finalNorm;
  }

  /** Sharded weights: milliseconds this model has waited for gathered weights, in all (the gathers' time that ran beside no layer); else 0. */
  get gatherWaitMs(): number {
    return this.weights.waitedMs;
  }

  /** Sharded weights: the elements of the gathered weights the model holds through a step (the staging buffers and the final norm's); else 0. */
  get gatheredWeightElements(): number {
    return this.weights.gatheredElements;
  }

  /** The token embedding of `ids` (sharded: from the table gathered for it alone, unreachable once this returns). */
  private async lookUp(ids: I32): Promise<F32> {
    return this.ops.embeddingForward(ids, await this.weights.table());
  }

  /** The LM head as one object for a run of tiles (see GptHead). */
  lmHead(options: GptHeadOptions = {}): GptHead {
    const columns = validHeadColumns("Gpt.lmHead", "gradientColumns", options.gradientColumns) ?? this.headColumns;
    return gptHead({ config: this.config, ops: this.ops, params: this.params, weight: () => this.weights.head(), columns });
  }

  /**
   * tokens [b, s] (at `options.positions`) -> logits [b * s, vocab] and the
   * context for backward; with `logits: false` the forward stops at the final
   * norm (context.hFinal [b * s, hidden], no logits).
   */
  forward(tokens: I32, options?: GptForwardOptions & { logits?: true }): Promise<GptLogitsContext>;
  forward(tokens: I32, options: GptForwardOptions): Promise<GptContext>;
  async forward(tokens: I32, options: GptForwardOptions = {}): Promise<GptContext> {
    const { hidden, vocab, maxSeq } = this.config;
    const positions = options.positions ?? 0;
    if (tokens.rank !== 2) throw new ModelError(`Gpt.forward: tokens must be [batch, seq], got ${tokens}`);
    const [batch, seqLength] = tokens.shape as [number, number];
    const last = typeof positions === "number" ? positions + seqLength - 1 : positions.reduce((a, b) => Math.max(a, b), -1);
    if (last >= maxSeq) throw new ModelError(`Gpt.forward: positions up to ${last} exceed maxSeq ${maxSeq} (positions 0 .. ${maxSeq - 1})`);
    const rows = batch * seqLength;
    const ids = tokens.reshape([rows]);
    for (let i = 0; i < rows; i++) {
      const id = ids.data[i]!;
      if (id < 0 || id >= vocab) throw new ModelError(`Gpt.forward: token id ${id} at row ${i} is outside the vocabulary of ${vocab}`);
    }
    const blocks: BlockContext[] = [];
    const final: { x?: F32; h?: F32; saved?: NormTensors } = {};
    await this.weights.startForward();
    const math: GptMath<F32> = {
      // sharded: the table gathered for the lookup only (a temporary, let go as the lookup returns)
      embed: async () => {
        const x = await this.lookUp(ids);
        this.weights.collect();
        return x;
      },
      block: async (layer, x) => {
        await this.weights.stageLayer(layer);
        // sharded: the next layer's weights gathered while this one runs (into the buffer of the layer before, which is done)
        this.weights.prefetch(layer + 1);
        // [rows, hidden] -> [b, s, hidden] -> [rows, hidden]
        const { y, context } = await this.blocks[layer]!.forward(x.reshape([batch, seqLength, hidden]), {
          positions,
          documents: options.documents,
          attentionRun: options.attentionRun,
        });
        blocks.push(context);
        if (this.bfloat16Checkpoints) {
          // x (the embedding's or the previous block's output) is read by nothing else: its bf16 copy stays, it goes back to the ops
          const x2 = context.storeInBfloat16();
          this.ops.release?.(x);
          // head groups with a tiled MLP: the float32 x2, read by nothing else either
          if (x2 !== null) this.ops.release?.(x2);
        }
        return y.reshape([rows, hidden]);
      },
      norm: async (x) => {
        final.x = x;
        const eps = this.blocks[0]?.config.eps ?? blockConfigOf(this.config).eps;
        const r = await this.finalNorm.forward(this.ops, x, this.finalNormWeights(), eps);
        final.saved = r.saved;
        final.h = r.y;
        return final.h;
      },
      head: (x) => this.lmHead().forward(x),
    };
    const context: GptContext = { ids, batch, seqLength, blocks };
    if (options.logits ?? true) context.logits = await gptForward(this.config, math);
    else {
      await gptHidden(this.config, math);
      // sharded: the head gathered here, where every rank is, not at a tile's first use (ranks may hold different numbers of tiles)
      if (this.params.sharded) await this.weights.head();
    }
    context.xFinal = final.x!;
    context.hFinal = final.h!;
    context.normSaved = final.saved!;
    return context;
  }

  /** The whole batch through the model (CausalLM): packed documents give their ids and positions. */
  async forwardBatch(batch: LMBatch, options: { logits: boolean }): Promise<CausalLMForward<GptContext>> {
    const documents = batch.documents;
    const sequence: GptForwardOptions = documents === undefined ? {} : { positions: documents.positions.data, documents: documents.ids.data };
    const context = await this.forward(batch.tokens, { ...sequence, logits: options.logits });
    return { context, labels: batch.labels.reshape([batch.labels.size]) };
  }

  /** Gives the blocks' attention buffers back when backward will not run (evaluation). */
  release(context: GptContext): void {
    context.blocks.forEach((c, layer) => this.blocks[layer]!.release(c));
    this.weights.letGoOfHead();
  }

  /**
   * Backpropagates dLogits [rows, vocab]; adds the weight gradients of this
   * input into params.grads. Spends the context (logits and hFinal are dropped
   * once the head's backward ran, then as in backwardFromHidden) and dLogits,
   * which goes back to the ops (BlockOps.release) once the head has read it.
   */
  backward(context: GptContext, dLogits: F32): Promise<void> {
    // not async: no frame of this call keeps dLogits alive past the head's backward
    return this.headBackward(context, dLogits).then((dh) => this.backwardFromHidden(context, dh));
  }

  /**
   * The LM head's backward of a whole context: dh [rows, hidden]; drops
   * context.logits and context.hFinal, and gives hFinal and dLogits (read for
   * the last time) back to the ops.
   */
  async headBackward(context: GptContext, dLogits: F32): Promise<F32> {
    const h = spent(context.hFinal, "backward");
    const dh = await this.lmHead().backward(h, dLogits);
    context.logits = undefined;
    context.hFinal = undefined;
    this.releaseSpent(dh, h, dLogits);
    return dh;
  }

  /** Gives `tensors` (read for the last time) back to the ops, except any sharing memory with `result`. */
  private releaseSpent(result: F32, ...tensors: F32[]): void {
    const spentTensors = tensors.filter((t) => t.data.buffer !== result.data.buffer);
    if (spentTensors.length > 0) this.ops.release?.(...spentTensors);
  }

  /**
   * Backpropagates dhFinal [rows, hidden], the gradient of the final norm's
   * output (the LM head's input): the final norm, every block (each block's
   * context is dropped as soon as its backward is done) and the embedding.
   * Adds the weight gradients into params.grads, except the head's (the
   * caller's, as `lmHead().backward` adds them). Spends the context and
   * dhFinal, which goes back to the ops once the final norm has read it.
   */
  backwardFromHidden(context: GptContext, dhFinal: F32): Promise<void> {
    // not async, and two steps: no frame keeps dhFinal, the final norm's input or its gradient alive while the blocks run backward
    return this.finalNormBackward(context, dhFinal).then((dy) => this.blocksBackward(context, dy));
  }

  /** The final norm's backward: dhFinal [rows, hidden] -> dy [b, s, hidden], the gradient at the last block's output. */
  private async finalNormBackward(context: GptContext, dhFinal: F32): Promise<F32> {
    const { hidden } = this.config;
    const { batch, seqLength } = context;
    const rows = batch * seqLength;
    if (dhFinal.rank !== 2 || dhFinal.shape[0] !== rows || dhFinal.shape[1] !== hidden)
      throw new ModelError(`Gpt.backwardFromHidden: dhFinal must be [${rows}, ${hidden}], got ${dhFinal}`);
    if (context.blocks.length !== this.blocks.length)
      throw new ModelError(`Gpt.backward: the context holds ${context.blocks.length} of ${this.blocks.length} block contexts (spent by an earlier backward?)`);
    const xFinal = spent(context.xFinal, "backwardFromHidden");
    const normSaved = spent(context.normSaved, "backwardFromHidden");
    context.xFinal = undefined;
    context.normSaved = undefined;
    context.hFinal = undefined;
    context.logits = undefined;
    // the loss is done with the head: a gathered one is not held through the blocks' backward
    this.weights.letGoOfHead();
    const r = await this.finalNorm.backward(this.ops, xFinal, this.finalNormWeights(), normSaved, dhFinal);
    const grads = this.finalNorm.weights.map(({ suffix }) => {
      this.params.accumulate(`norm.${suffix}`, r.grads[suffix]!.data);
      return r.grads[suffix]!;
    });
    this.ops.release?.(...grads);
    const dx = r.dx;
    // the last block's output and dhFinal, read for the last time (BlockOps.release: their memory may serve later outputs)
    this.releaseSpent(dx, xFinal, dhFinal);
    // [rows, hidden] -> [b, s, hidden]
    return dx.reshape([batch, seqLength, hidden]);
  }

  /** Every block's backward from the last (each context dropped as soon as its block is done), then the embedding's. */
  private async blocksBackward(context: GptContext, dy: F32): Promise<void> {
    const { hidden, vocab } = this.config;
    const rows = context.batch * context.seqLength;
    const firstName = blockWeightSpecs(this.blocks[0]?.config ?? blockConfigOf(this.config))[0]!.name;
    for (let layer = this.blocks.length - 1; layer >= 0; layer--) {
      // popped first: once the block's backward returns nothing holds its activations; dy is ours to overwrite (the block's dx2 reuses it)
      const blockContext = context.blocks.pop()!;
      await this.weights.stageLayer(layer);
      this.weights.prefetch(layer - 1);
      const g = await this.blocks[layer]!.backward(blockContext, dy, { overwriteDy: true });
      await this.params.accumulateRun(`blocks.${layer}.${firstName}`, g.flat, this.ops);
      // dy (the final norm's or the later block's dx) and the block's input (the embedding's or the earlier block's output) are spent
      this.ops.release?.(dy, blockContext.input);
      dy = g.dx;
    }
    // [b, s, hidden] -> [rows, hidden]
    // straight into the table's gradient (no [vocab, hidden] temporary)
    await this.ops.embeddingBackward(context.ids, dy.reshape([rows, hidden]), vocab, this.params.grad("embed.weight"));
    this.ops.release?.(dy);
  }
}

/** A context tensor that backward needs, or a ModelError when an earlier backward dropped it. */
function spent<T>(value: T | undefined, who: string): T {
  if (value === undefined) throw new ModelError(`Gpt.${who}: the context was spent by an earlier backward`);
  return value;
}
