/**
 * The recorder: runs blockForward (or a part of it) on tensors through a
 * TransformerBlock's kernels and norm, saving what backward reads into the
 * block's Activations (or nothing, under activation checkpointing, where
 * every intermediate goes back to the ops once read).
 */
import type { BlockOps } from "@ulysses/kernels";
import type { Tensor } from "@ulysses/tensors";
import type { BlockAttentionContext, BlockAttentionOptions } from "./block-attention.js";
import type { Activations, Geometry } from "./block-activations.js";
import type { BlockMath, LinearName, NormName } from "./block-forward.js";
import { addWith, type QkNormName } from "./block-weights.js";
import { hasBias } from "./block-config.js";
import { headNormForward } from "./head-norm.js";
import { BlockError } from "./errors.js";
import type { TransformerBlock } from "./transformer-block.js";

type F32 = Tensor<"float32">;

/** Runs blockForward (or a part of it) on tensors through the block's kernels, saving what backward reads. */
export class Recorder implements BlockMath<F32> {
  /** The attention's context and output until attn.o has read them, when nothing is saved. */
  private pending: { context: BlockAttentionContext; out: F32 } | null = null;

  constructor(
    private readonly block: TransformerBlock,
    private readonly ops: BlockOps,
    /** Where to save what backward reads; null: nothing, and the attention's buffers go back as soon as attn.o has read them (checkpointing). */
    private readonly saved: Activations | null,
    /** null for MLP tiles, which have no attention. */
    private readonly geometry: Geometry | null,
  ) {}

  async norm(x: F32, name: NormName): Promise<F32> {
    const { config } = this.block;
    const { y, saved } = await this.block.norm.forward(this.ops, x, this.block.normWeights(name), config.eps);
    this.saved?.norms.set(name, { x, saved });
    return y;
  }

  async linear(x: F32, name: LinearName): Promise<F32> {
    const { config, weights } = this.block;
    this.saved?.inputs.set(name, x);
    const y = await this.ops.linearForward(x, weights[`${name}.w`]!, hasBias(config, name) ? weights[`${name}.b`] : undefined);
    if (name === "attn.o" && this.pending !== null) {
      this.block.attention.release(this.pending.context, this.pending.out);
      this.pending = null;
    }
    // Saving nothing, these inputs are read for the last time: h1 by attn.v (after q and k), h2 by mlp.up (after mlp.gate), the
    // activation by mlp.down. (attn.o reads the attention's output, which goes back to the attention above.)
    if (this.saved === null && (name === "attn.v" || name === "mlp.up" || name === "mlp.down")) this.ops.release?.(x);
    return y;
  }

  splitHeads(x: F32, heads: number): F32 {
    const { batch, seq } = this.where();
    // [rows, n * D] -> [b, s, n, D]
    return x.reshape([batch, seq, heads, this.block.config.headDim]);
  }

  mergeHeads(x: F32): F32 {
    const { batch, seq } = this.where();
    // [b, s, n, D] -> [rows, n * D]
    return x.reshape([batch * seq, x.shape[2]! * x.shape[3]!]);
  }

  /** qkNorm: x [b, s, n, D] is q's or k's projection; saving nothing, it goes back to the ops once normalised. */
  async headNorm(x: F32, name: QkNormName): Promise<F32> {
    const { config, weights } = this.block;
    const { y, record } = await headNormForward(this.ops, x, weights[`${name}.gamma`]!, config.eps);
    if (this.saved !== null) this.saved.headNorms.set(name, record);
    else if (y.data !== x.data) this.ops.release?.(x);
    return y;
  }

  /** x is q's or k's projection (or its per-head norm), which nothing else reads: it goes back to the ops once rotated. */
  async rope(x: F32): Promise<F32> {
    const y = await this.ops.ropeForward(x, this.where().call.positions, this.block.config.ropeBase, this.block.config.ropeScaling);
    if (y.data !== x.data) this.ops.release?.(x);
    return y;
  }

  async attention(q: F32, k: F32, v: F32): Promise<F32> {
    const { documents, run } = this.where().call;
    const options: BlockAttentionOptions = { causal: this.block.config.causal };
    if (documents !== undefined) options.documents = documents;
    if (run !== undefined) options.run = run;
    const { out, context } = await this.block.attention.forward(q, k, v, options);
    // q and k (the rotations' outputs) and v (attn.v's) are read by nothing else: they go back to the ops unless the context
    // keeps them (the one-device attention saves them; a sharded one saves its exchanged copies)
    const spent = [...new Set([q, k, v])].filter((t) => context.keeps?.(t) === false && t.data.buffer !== out.data.buffer);
    if (spent.length > 0) this.ops.release?.(...spent);
    if (this.saved === null) {
      this.pending = { context, out };
    } else {
      this.saved.attention = context;
      this.saved.attentionOut = out;
    }
    return out;
  }

  async residual(a: F32, b: F32): Promise<F32> {
    return addWith(this.ops, a, b);
  }

  async mlpActivation(inputs: F32[]): Promise<F32> {
    const y = await this.block.mlp.forward(this.ops, inputs);
    if (this.saved === null) return this.consumed(y, ...inputs);
    inputs.forEach((x, i) => this.saved!.mlp.set(i, x));
    return y;
  }

  /** Returns y after giving `inputs` (read for the last time: up's and gate's projections, saving nothing) back to the ops. */
  private consumed(y: F32, ...inputs: F32[]): F32 {
    this.ops.release?.(...inputs.filter((t) => t.data !== y.data));
    return y;
  }

  private where(): Geometry {
    if (this.geometry === null) throw new BlockError("TransformerBlock: an MLP tile has no attention");
    return this.geometry;
  }
}
