/**
 * The GPT, written as single-device model code: token embedding, L pre-norm
 * TransformerBlocks, a final norm and the LM head (optionally tied to the
 * embedding). It runs on whatever shard of the sequence it is given; the
 * parallelism lives in the blocks and in the SP group handed to them. Weight
 * gradients are accumulated, unreduced, into the flat gradient of the
 * ParameterStore: summing them over ranks, clipping and the optimizer step are
 * `train-step.ts`'s job; the SP-aware loss is `loss.ts`'s.
 */
import type { ProcessGroup } from "@ulysses/collectives";
import type { BlockOps, LayerNormSaved, LocalAttention } from "@ulysses/kernels";
import { BlockContext, TransformerBlock, blockWeightSpecs, createShardedAttention, type BlockWeights, type ShardedAttention } from "@ulysses/block";
import { Tensor, permute } from "@ulysses/tensors";
import { ModelError } from "./errors.js";
import { blockConfigOf, gptParamSpecs, validateGptConfig, type GptConfig } from "./gpt-config.js";
import { ParameterStore } from "./parameters.js";

type F32 = Tensor<"float32">;
type I32 = Tensor<"int32">;

export interface GptOptions {
  ops: BlockOps;
  /** The local attention kernel each block's sequence-parallel wrapper calls. */
  localAttention: LocalAttention;
  /** The sequence-parallel group (size 1 on a single device). */
  group: ProcessGroup;
  seed: number;
  /** Recompute each block's activations in backward. */
  activationCheckpointing?: boolean;
}

/** What forward keeps for backward. */
export interface GptContext {
  /** [rows] token ids of this shard, rows = b * s_r */
  ids: I32;
  batch: number;
  shardLength: number;
  blocks: BlockContext[];
  /** Final-norm input [rows, hidden] and output. */
  xFinal: F32;
  hFinal: F32;
  normSaved: LayerNormSaved | { rstd: F32 };
  /** [rows, vocab] */
  logits: F32;
}

const NORM_EPS = 1e-5;

export class Gpt {
  readonly config: GptConfig;
  readonly params: ParameterStore;
  readonly blocks: TransformerBlock[];
  readonly group: ProcessGroup;
  private readonly ops: BlockOps;
  private readonly norm: "layernorm" | "rmsnorm";

  constructor(config: GptConfig, options: GptOptions) {
    validateGptConfig(config);
    this.config = config;
    this.ops = options.ops;
    this.group = options.group;
    this.params = new ParameterStore(gptParamSpecs(config));
    this.params.initialise(options.seed);
    const blockConfig = blockConfigOf(config);
    this.norm = blockConfig.norm;
    this.blocks = [];
    // one sequence-parallel wrapper for every layer: layers run one at a time, and a
    // shared wrapper keeps one set of exchange buffers instead of one per layer
    const attention: ShardedAttention = createShardedAttention(config.attention, options.localAttention, options.group);
    for (let layer = 0; layer < config.layers; layer++) {
      const weights: BlockWeights = {};
      for (const spec of blockWeightSpecs(blockConfig)) weights[spec.name] = this.params.value(`blocks.${layer}.${spec.name}`);
      this.blocks.push(
        new TransformerBlock(blockConfig, {
          ops: options.ops,
          group: options.group,
          attention,
          weights,
          checkpoint: options.activationCheckpointing ?? false,
        }),
      );
    }
  }

  /** The LM head as [hidden, vocab] (a transposed copy of the embedding when tied). */
  private headWeight(): F32 {
    // [vocab, hidden] -> [hidden, vocab]
    return this.config.tiedHead ? permute(this.params.value("embed.weight"), [1, 0]) : this.params.value("head.w");
  }

  /**
   * tokens [b, s_r]: this rank's shard of a global sequence of `seqLength`
   * tokens. Returns logits [b * s_r, vocab] and the context for backward.
   */
  async forward(tokens: I32, seqLength: number): Promise<GptContext> {
    const { hidden, vocab, maxSeq } = this.config;
    if (tokens.rank !== 2) throw new ModelError(`Gpt.forward: tokens must be [batch, seq], got ${tokens}`);
    if (seqLength > maxSeq) throw new ModelError(`Gpt.forward: sequence of ${seqLength} tokens exceeds maxSeq ${maxSeq}`);
    const [batch, shardLength] = tokens.shape as [number, number];
    const rows = batch * shardLength;
    const ids = tokens.reshape([rows]);
    for (let i = 0; i < rows; i++) {
      const id = ids.data[i]!;
      if (id < 0 || id >= vocab) throw new ModelError(`Gpt.forward: token id ${id} at row ${i} is outside the vocabulary of ${vocab}`);
    }
    // [rows, hidden] -> [b, s_r, hidden]
    let x = (await this.ops.embeddingForward(ids, this.params.value("embed.weight"))).reshape([batch, shardLength, hidden]);
    const contexts: BlockContext[] = [];
    for (const block of this.blocks) {
      const { y, context } = await block.forward(x, { seqLength });
      contexts.push(context);
      x = y;
    }
    // [b, s_r, hidden] -> [rows, hidden]
    const xFinal = x.reshape([rows, hidden]);
    const gamma = this.params.value("norm.gamma");
    let hFinal: F32;
    let normSaved: LayerNormSaved | { rstd: F32 };
    if (this.norm === "rmsnorm") {
      const r = await this.ops.rmsNormForward(xFinal, gamma, NORM_EPS);
      hFinal = r.y;
      normSaved = { rstd: r.rstd };
    } else {
      const r = await this.ops.layerNormForward(xFinal, gamma, this.params.value("norm.beta"), NORM_EPS);
      hFinal = r.y;
      normSaved = { mean: r.mean, rstd: r.rstd };
    }
    const logits = await this.ops.linearForward(hFinal, this.headWeight());
    return { ids, batch, shardLength, blocks: contexts, xFinal, hFinal, normSaved, logits };
  }

  /** Backpropagates dLogits [rows, vocab]; adds this rank's (unreduced) weight gradients into params.grads. */
  async backward(context: GptContext, dLogits: F32): Promise<void> {
    const { hidden, vocab } = this.config;
    const { batch, shardLength } = context;
    const head = await this.ops.linearBackward(context.hFinal, this.headWeight(), dLogits, false);
    if (this.config.tiedHead) {
      // [hidden, vocab] -> [vocab, hidden]
      this.params.accumulate("embed.weight", permute(head.dw, [1, 0]).data);
    } else {
      this.params.accumulate("head.w", head.dw.data);
    }
    const gamma = this.params.value("norm.gamma");
    let dx: F32;
    if (this.norm === "rmsnorm") {
      const r = await this.ops.rmsNormBackward(context.xFinal, gamma, (context.normSaved as { rstd: F32 }).rstd, head.dx);
      this.params.accumulate("norm.gamma", r.dGamma.data);
      dx = r.dx;
    } else {
      const r = await this.ops.layerNormBackward(context.xFinal, gamma, context.normSaved as LayerNormSaved, head.dx);
      this.params.accumulate("norm.gamma", r.dGamma.data);
      this.params.accumulate("norm.beta", r.dBeta.data);
      dx = r.dx;
    }
    // [rows, hidden] -> [b, s_r, hidden]
    let dy = dx.reshape([batch, shardLength, hidden]);
    const firstName = blockWeightSpecs(this.blocks[0]?.config ?? blockConfigOf(this.config))[0]!.name;
    for (let layer = this.blocks.length - 1; layer >= 0; layer--) {
      const g = await this.blocks[layer]!.backward(context.blocks[layer]!, dy, { reduceGradients: false });
      this.params.accumulateRun(`blocks.${layer}.${firstName}`, g.flat);
      dy = g.dx;
    }
    // [b, s_r, hidden] -> [rows, hidden]
    const dEmbed = await this.ops.embeddingBackward(context.ids, dy.reshape([batch * shardLength, hidden]), vocab);
    this.params.accumulate("embed.weight", dEmbed.data);
  }
}
