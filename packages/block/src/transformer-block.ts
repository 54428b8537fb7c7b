/**
 * TransformerBlock: one pre-norm transformer block, forward and backward on
 * this rank's sequence shard, weights replicated on every rank.
 *
 *   x [b, s_r, hidden]
 *   h1 = norm1(x); q, k, v = h1 @ Wq, Wk, Wv; RoPE(q, k) at global positions t_r..
 *   o  = attention(q, k, v)        (UlyssesAttention or AllGatherKVAttention: the only communication)
 *   x2 = x + o @ Wo
 *   h2 = norm2(x2); m = MLP(h2)    (GELU: down(gelu(up h2)); SwiGLU: down(silu(gate h2) * up h2))
 *   y  = x2 + m
 *
 * Backward returns dx and the weight gradients; those are summed over the
 * group with one all-reduce of a flat buffer unless the caller opts out (to
 * bucket them itself). Activation checkpointing keeps only x and recomputes
 * the forward (including its communication) in backward. Kernels come from
 * the BlockOps and LocalAttention given; this module only wires them.
 */
import type { AttentionGradients, BlockOps, LayerNormSaved, LocalAttention } from "@ulysses/kernels";
import type { ProcessGroup } from "@ulysses/collectives";
import { Tensor } from "@ulysses/tensors";
import { AllGatherKVAttention } from "./allgather-kv-attention.js";
import { resolveBlockConfig, type AttentionKind, type BlockConfig, type ResolvedBlockConfig } from "./block-config.js";
import { blockWeightSpecs, checkBlockWeights, FlatTensors, initBlockWeights, type BlockWeights } from "./block-weights.js";
import { BlockError } from "./errors.js";
import { sequenceShards, type SequenceOptions, type SequenceShards } from "./sequence-shards.js";
import type { ShardedAttention, ShardedAttentionContext } from "./sharded-attention.js";
import { UlyssesAttention } from "./ulysses-attention.js";

type F32 = Tensor<"float32">;

export interface TransformerBlockOptions {
  ops: BlockOps;
  group: ProcessGroup;
  /** The local kernel to wrap in the config's attention kind (or give `attention`). */
  localAttention?: LocalAttention;
  /** A ready sequence-parallel attention (for example one shared by several blocks). */
  attention?: ShardedAttention;
  /** Weights to use (not copied); default: `initBlockWeights(config, seed)`. */
  weights?: BlockWeights;
  /** Seed for the default weights (default 0). */
  seed?: number;
  /** Activation checkpointing: keep only the block input, recompute in backward. */
  checkpoint?: boolean;
}

export interface BlockBackwardOptions {
  /** Sum weight gradients over the group (one flat all-reduce); default true. */
  reduceGradients?: boolean;
}

type NormSaved = LayerNormSaved | { rstd: F32 };

/** Everything the backward pass reads. */
interface Activations {
  shards: SequenceShards;
  /** [rows, hidden], rows = b * s_r */
  x: F32;
  h1: F32;
  norm1: NormSaved;
  /** attention output [rows, H*D] */
  attnOut: F32;
  attention: ShardedAttentionContext;
  x2: F32;
  h2: F32;
  norm2: NormSaved;
  /** GELU: the up projection; SwiGLU: the up projection (gate separately) [rows, mlpHidden] */
  up: F32;
  gate?: F32;
  /** MLP activation [rows, mlpHidden] */
  act: F32;
}

/** What forward keeps for backward. */
export class BlockContext {
  constructor(
    readonly owner: TransformerBlock,
    /** Input [b, s_r, hidden]. */
    readonly input: F32,
    readonly sequence: SequenceOptions,
    /** Null under activation checkpointing. */
    readonly activations: Activations | null,
  ) {}

  /** Bytes of the tensors this context keeps alive (the input included). */
  get savedBytes(): number {
    const a = this.activations;
    if (a === null) return this.input.byteLength;
    const tensors: F32[] = [a.h1, a.attnOut, a.x2, a.h2, a.up, a.act, ...Object.values(a.norm1), ...Object.values(a.norm2)];
    if (a.gate !== undefined) tensors.push(a.gate);
    return this.input.byteLength + tensors.reduce((n, t) => n + t.byteLength, 0) + a.attention.savedBytes;
  }
}

export interface BlockGradients {
  /** [b, s_r, hidden] */
  dx: F32;
  /** Weight gradients by name (views into `flat`). */
  grads: BlockWeights;
  /** Every weight gradient back to back, in `blockWeightSpecs` order. */
  flat: Float32Array;
}

function addInto(target: F32, ...terms: F32[]): F32 {
  const t = target.data;
  for (const term of terms) {
    const d = term.data;
    for (let i = 0; i < t.length; i++) t[i] += d[i]!;
  }
  return target;
}

function sum2(a: F32, b: F32): F32 {
  return addInto(a.clone(), b);
}

/** The sequence-parallel wrapper of `kind` around a local attention kernel, on `group`. */
export function createShardedAttention(kind: AttentionKind, local: LocalAttention, group: ProcessGroup): ShardedAttention {
  return kind === "allgather" ? new AllGatherKVAttention(local, group) : new UlyssesAttention(local, group);
}

export class TransformerBlock {
  readonly config: ResolvedBlockConfig;
  readonly weights: BlockWeights;
  readonly attention: ShardedAttention;
  readonly group: ProcessGroup;
  readonly checkpoint: boolean;
  private readonly ops: BlockOps;

  constructor(config: BlockConfig, options: TransformerBlockOptions) {
    this.config = resolveBlockConfig(config);
    this.ops = options.ops;
    this.group = options.group;
    this.checkpoint = options.checkpoint ?? false;
    if (options.attention !== undefined) {
      this.attention = options.attention;
      if (this.attention.group !== this.group) throw new BlockError(`TransformerBlock: attention ${this.attention.name} runs on another group than the block`);
    } else if (options.localAttention !== undefined) {
      this.attention = createShardedAttention(this.config.attention, options.localAttention, this.group);
    } else {
      throw new BlockError("TransformerBlock: give `localAttention` (a kernel to wrap) or `attention` (a sequence-parallel wrapper)");
    }
    this.attention.checkHeads(this.config.heads, this.config.kvHeads);
    this.weights = options.weights ?? initBlockWeights(this.config, options.seed ?? 0);
    checkBlockWeights(this.config, this.weights);
  }

  /** x [b, s_r, hidden] (this rank's shard) -> y [b, s_r, hidden] and the context backward needs. */
  async forward(x: F32, sequence: SequenceOptions = {}): Promise<{ y: F32; context: BlockContext }> {
    const { y, activations } = await this.run(x, sequence, !this.checkpoint);
    return { y, context: new BlockContext(this, x, { ...sequence }, this.checkpoint ? null : activations) };
  }

  /**
   * Gives a context's attention buffers back for reuse when backward will not
   * run (evaluation); the context is unusable afterwards. Backward does this
   * by itself.
   */
  release(context: BlockContext): void {
    const a = context.activations;
    if (context.owner === this && a !== null) this.attention.release(a.attention, a.attnOut);
  }

  /** dy [b, s_r, hidden] -> dx and weight gradients (summed over the group unless reduceGradients is false). */
  async backward(context: BlockContext, dy: F32, options: BlockBackwardOptions = {}): Promise<BlockGradients> {
    if (!(context instanceof BlockContext) || context.owner !== this) throw new BlockError("TransformerBlock.backward needs the context its own forward returned");
    if (context.activations?.attention.released === true) throw new BlockError("TransformerBlock.backward: the context was released (by release() or an earlier backward)");
    if (dy.rank !== 3 || dy.shape.some((d, i) => d !== context.input.shape[i])) {
      throw new BlockError(`TransformerBlock.backward: dy ${dy} does not match the input ${context.input}`);
    }
    const a = context.activations ?? (await this.run(context.input, context.sequence, true)).activations;
    const { hidden, heads, headDim, kvHeads, ropeBase } = this.config;
    const [b, s] = context.input.shape as unknown as [number, number, number];
    const rows = b * s;
    const offset = a.shards.starts[this.group.rank]!;
    const grads = new FlatTensors(blockWeightSpecs(this.config));
    const dOut = dy.reshape([rows, hidden]);

    // MLP: y = x2 + down(act).
    const dAct = await this.linearBackward(a.act, "mlp.down", dOut, grads);
    let dh2: F32;
    if (this.config.mlp === "swiglu") {
      const { dGate, dUp } = await this.ops.swigluBackward(a.gate!, a.up, dAct);
      dh2 = sum2(await this.linearBackward(a.h2, "mlp.gate", dGate, grads), await this.linearBackward(a.h2, "mlp.up", dUp, grads));
    } else {
      const dUp = await this.ops.geluBackward(a.up, dAct);
      dh2 = await this.linearBackward(a.h2, "mlp.up", dUp, grads);
    }
    const dx2 = addInto(await this.normBackward("norm2", a.x2, a.norm2, dh2, grads), dOut);

    // Attention: x2 = x + o @ Wo.
    const dAttn = await this.linearBackward(a.attnOut, "attn.o", dx2, grads);
    // [rows, H*D] -> [b, s_r, H, D]
    const g: AttentionGradients = await this.attention.backward(a.attention, dAttn.reshape([b, s, heads, headDim]));
    const dq = await this.ops.ropeBackward(g.dq, offset, ropeBase);
    const dk = await this.ops.ropeBackward(g.dk, offset, ropeBase);
    // [b, s_r, H, D] -> [rows, H*D]; [b, s_r, Hkv, D] -> [rows, Hkv*D]
    const dh1 = addInto(
      await this.linearBackward(a.h1, "attn.q", dq.reshape([rows, heads * headDim]), grads),
      await this.linearBackward(a.h1, "attn.k", dk.reshape([rows, kvHeads * headDim]), grads),
      await this.linearBackward(a.h1, "attn.v", g.dv.reshape([rows, kvHeads * headDim]), grads),
    );
    const dx = addInto(await this.normBackward("norm1", a.x, a.norm1, dh1, grads), dx2);
    // The attention's buffers are spent: hand them back for the next step.
    this.attention.release(a.attention, a.attnOut, g.dq, g.dk, g.dv);

    if (options.reduceGradients ?? true) {
      await this.group.allReduce(new Tensor("float32", [grads.flat.length], grads.flat), { op: "sum" });
    }
    // [rows, hidden] -> [b, s_r, hidden]
    return { dx: dx.reshape([b, s, hidden]), grads: grads.tensors, flat: grads.flat };
  }

  /** The forward computation; `keep` false releases the attention's buffers as soon as they are used (checkpointing). */
  private async run(input: F32, sequence: SequenceOptions, keep: boolean): Promise<{ y: F32; activations: Activations }> {
    const { hidden, heads, kvHeads, headDim, ropeBase, causal } = this.config;
    if (input.dtype !== "float32" || input.rank !== 3 || input.shape[2] !== hidden) {
      throw new BlockError(`TransformerBlock.forward: x must be float32 [batch, seq, ${hidden}], got ${input}`);
    }
    const [b, s] = input.shape as unknown as [number, number, number];
    const shards = sequenceShards(s, this.group.rank, this.group.size, sequence);
    const offset = shards.starts[this.group.rank]!;
    const rows = b * s;
    // [b, s_r, hidden] -> [rows, hidden]
    const x = input.reshape([rows, hidden]);

    const { y: h1, saved: norm1 } = await this.normForward("norm1", x);
    // [rows, H*D] -> [b, s_r, H, D]; k, v: [rows, Hkv*D] -> [b, s_r, Hkv, D]
    const q = await this.ops.ropeForward((await this.linear(h1, "attn.q")).reshape([b, s, heads, headDim]), offset, ropeBase);
    const k = await this.ops.ropeForward((await this.linear(h1, "attn.k")).reshape([b, s, kvHeads, headDim]), offset, ropeBase);
    const v = (await this.linear(h1, "attn.v")).reshape([b, s, kvHeads, headDim]);
    const attn = await this.attention.forward(q, k, v, { causal, seqSizes: shards.sizes });
    // [b, s_r, H, D] -> [rows, H*D]
    const attnOut = attn.out.reshape([rows, heads * headDim]);
    const x2 = addInto(await this.linear(attnOut, "attn.o"), x);
    if (!keep) this.attention.release(attn.context, attn.out);

    const { y: h2, saved: norm2 } = await this.normForward("norm2", x2);
    let up: F32;
    let gate: F32 | undefined;
    let act: F32;
    if (this.config.mlp === "swiglu") {
      gate = await this.linear(h2, "mlp.gate");
      up = await this.linear(h2, "mlp.up");
      act = await this.ops.swigluForward(gate, up);
    } else {
      up = await this.linear(h2, "mlp.up");
      act = await this.ops.geluForward(up);
    }
    const y = addInto(await this.linear(act, "mlp.down"), x2);
    const activations: Activations = { shards, x, h1, norm1, attnOut, attention: attn.context, x2, h2, norm2, up, act };
    if (gate !== undefined) activations.gate = gate;
    // [rows, hidden] -> [b, s_r, hidden]
    return { y: y.reshape([b, s, hidden]), activations };
  }

  private linear(x: F32, name: string): Promise<F32> {
    return this.ops.linearForward(x, this.weights[`${name}.w`]!, this.config.bias ? this.weights[`${name}.b`] : undefined);
  }

  /** Writes dW (and db) into `grads`; returns dx. */
  private async linearBackward(x: F32, name: string, dy: F32, grads: FlatTensors): Promise<F32> {
    const r = await this.ops.linearBackward(x, this.weights[`${name}.w`]!, dy, this.config.bias);
    grads.set(`${name}.w`, r.dw);
    if (this.config.bias) grads.set(`${name}.b`, r.db!);
    return r.dx;
  }

  private async normForward(name: string, x: F32): Promise<{ y: F32; saved: NormSaved }> {
    const gamma = this.weights[`${name}.gamma`]!;
    if (this.config.norm === "rmsnorm") {
      const { y, rstd } = await this.ops.rmsNormForward(x, gamma, this.config.eps);
      return { y, saved: { rstd } };
    }
    const { y, mean, rstd } = await this.ops.layerNormForward(x, gamma, this.weights[`${name}.beta`]!, this.config.eps);
    return { y, saved: { mean, rstd } };
  }

  private async normBackward(name: string, x: F32, saved: NormSaved, dy: F32, grads: FlatTensors): Promise<F32> {
    const gamma = this.weights[`${name}.gamma`]!;
    if (this.config.norm === "rmsnorm") {
      const r = await this.ops.rmsNormBackward(x, gamma, saved.rstd, dy);
      grads.set(`${name}.gamma`, r.dGamma);
      return r.dx;
    }
    const r = await this.ops.layerNormBackward(x, gamma, saved as LayerNormSaved, dy);
    grads.set(`${name}.gamma`, r.dGamma);
    grads.set(`${name}.beta`, r.dBeta);
    return r.dx;
  }
}
