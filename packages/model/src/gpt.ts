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
 */
import { type BlockContext, LocalBlockAttention, TransformerBlock, blockWeightSpecs, type BlockAttention, type BlockWeights } from "@ulysses/block";
import type { BlockOps, LayerNormSaved, LocalAttention, RopePositions } from "@ulysses/kernels";
import { permute, type Tensor } from "@ulysses/tensors";
import { ModelError } from "./errors.js";
import { gptForward, type GptMath } from "./gpt-forward.js";
import { blockConfigOf, gptParamSpecs, validateGptConfig, type GptConfig } from "./gpt-config.js";
import { ParameterStore } from "./parameters.js";

type F32 = Tensor<"float32">;
type I32 = Tensor<"int32">;

export interface GptOptions {
  ops: BlockOps;
  /** The attention kernel every layer runs (or give `attention`). */
  localAttention?: LocalAttention;
  /** One BlockAttention shared by every layer (layers run one at a time). */
  attention?: BlockAttention;
  seed: number;
  /** Recompute each block's activations in backward. */
  activationCheckpointing?: boolean;
}

export interface GptForwardOptions {
  /** RoPE positions: the first token's (default 0), or every token's, int32 [b * s]. */
  positions?: RopePositions;
  /** Packed documents: each token's document id, int32 [b * s], non-decreasing per row. */
  documents?: Int32Array;
}

/** What forward keeps for backward. */
export interface GptContext {
  /** [rows] token ids, rows = b * s */
  ids: I32;
  batch: number;
  seqLength: number;
  blocks: BlockContext[];
  /** Final-norm input [rows, hidden] and output. */
  xFinal: F32;
  hFinal: F32;
  normSaved: LayerNormSaved | { rstd: F32 };
  /** [rows, vocab] */
  logits: F32;
}

export class Gpt {
  readonly config: GptConfig;
  readonly params: ParameterStore;
  readonly blocks: TransformerBlock[];
  private readonly ops: BlockOps;

  constructor(config: GptConfig, options: GptOptions) {
    validateGptConfig(config);
    this.config = config;
    this.ops = options.ops;
    this.params = new ParameterStore(gptParamSpecs(config));
    this.params.initialise(options.seed);
    const blockConfig = blockConfigOf(config);
    let attention = options.attention;
    if (attention === undefined) {
      if (options.localAttention === undefined) throw new ModelError("Gpt: give `localAttention` (a kernel) or `attention` (a BlockAttention)");
      attention = new LocalBlockAttention(options.localAttention);
    }
    this.blocks = [];
    for (let layer = 0; layer < config.layers; layer++) {
      const weights: BlockWeights = {};
      for (const spec of blockWeightSpecs(blockConfig)) weights[spec.name] = this.params.value(`blocks.${layer}.${spec.name}`);
      this.blocks.push(new TransformerBlock(blockConfig, { ops: options.ops, attention, weights, checkpoint: options.activationCheckpointing ?? false }));
    }
  }

  /** The LM head as [hidden, vocab] (a transposed copy of the embedding when tied). */
  private headWeight(): F32 {
    // [vocab, hidden] -> [hidden, vocab]
    return this.config.tiedHead ? permute(this.params.value("embed.weight"), [1, 0]) : this.params.value("head.w");
  }

  /** tokens [b, s] (at `options.positions`) -> logits [b * s, vocab] and the context for backward. */
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
    const final: { x?: F32; h?: F32; saved?: LayerNormSaved | { rstd: F32 } } = {};
    const math: GptMath<F32> = {
      embed: () => this.ops.embeddingForward(ids, this.params.value("embed.weight")),
      block: async (layer, x) => {
        // [rows, hidden] -> [b, s, hidden] -> [rows, hidden]
        const { y, context } = await this.blocks[layer]!.forward(x.reshape([batch, seqLength, hidden]), { positions, documents: options.documents });
        blocks.push(context);
        return y.reshape([rows, hidden]);
      },
      norm: async (x) => {
        final.x = x;
        const gamma = this.params.value("norm.gamma");
        const eps = this.blocks[0]?.config.eps ?? blockConfigOf(this.config).eps;
        if ((this.config.norm ?? "layernorm") === "rmsnorm") {
          const r = await this.ops.rmsNormForward(x, gamma, eps);
          final.saved = { rstd: r.rstd };
          final.h = r.y;
        } else {
          const r = await this.ops.layerNormForward(x, gamma, this.params.value("norm.beta"), eps);
          final.saved = { mean: r.mean, rstd: r.rstd };
          final.h = r.y;
        }
        return final.h;
      },
      head: (x) => this.ops.linearForward(x, this.headWeight()),
    };
    const logits = await gptForward(this.config, math);
    return { ids, batch, seqLength, blocks, xFinal: final.x!, hFinal: final.h!, normSaved: final.saved!, logits };
  }

  /** Gives the blocks' attention buffers back when backward will not run (evaluation). */
  release(context: GptContext): void {
    context.blocks.forEach((c, layer) => this.blocks[layer]!.release(c));
  }

  /** Backpropagates dLogits [rows, vocab]; adds the weight gradients of this input into params.grads. */
  async backward(context: GptContext, dLogits: F32): Promise<void> {
    const { hidden, vocab } = this.config;
    const { batch, seqLength } = context;
    const head = await this.ops.linearBackward(context.hFinal, this.headWeight(), dLogits, false);
    if (this.config.tiedHead) {
      // [hidden, vocab] -> [vocab, hidden]
      this.params.accumulate("embed.weight", permute(head.dw, [1, 0]).data);
    } else {
      this.params.accumulate("head.w", head.dw.data);
    }
    const gamma = this.params.value("norm.gamma");
    let dx: F32;
    if ((this.config.norm ?? "layernorm") === "rmsnorm") {
      const r = await this.ops.rmsNormBackward(context.xFinal, gamma, (context.normSaved as { rstd: F32 }).rstd, head.dx);
      this.params.accumulate("norm.gamma", r.dGamma.data);
      dx = r.dx;
    } else {
      const r = await this.ops.layerNormBackward(context.xFinal, gamma, context.normSaved as LayerNormSaved, head.dx);
      this.params.accumulate("norm.gamma", r.dGamma.data);
      this.params.accumulate("norm.beta", r.dBeta.data);
      dx = r.dx;
    }
    // [rows, hidden] -> [b, s, hidden]
    let dy = dx.reshape([batch, seqLength, hidden]);
    const firstName = blockWeightSpecs(this.blocks[0]?.config ?? blockConfigOf(this.config))[0]!.name;
    for (let layer = this.blocks.length - 1; layer >= 0; layer--) {
      const g = await this.blocks[layer]!.backward(context.blocks[layer]!, dy);
      this.params.accumulateRun(`blocks.${layer}.${firstName}`, g.flat);
      dy = g.dx;
    }
    // [b, s, hidden] -> [rows, hidden]
    const dEmbed = await this.ops.embeddingBackward(context.ids, dy.reshape([batch * seqLength, hidden]), vocab);
    this.params.accumulate("embed.weight", dEmbed.data);
  }
}
