/**
 * TransformerBlock: one pre-norm transformer block, forward and backward,
 * plain one-device code. Its forward is `blockForward` (block-forward.ts)
 * run on tensors by a recorder that keeps what backward needs; backward is
 * written here and returns dx and the weight gradients. Positions are an
 * input (`positions`: the position of the first token, or of every token
 * when documents are packed, for RoPE), and so are the document boundaries
 * of packed sequences (`documents`: the attention masks across them). The block never communicates and never reduces anything: sequence
 * parallelism (@ulysses/parallel) swaps its `attention` for a sharded one and
 * sums the gradients from outside. Activation checkpointing keeps only x and
 * recomputes the forward in backward. Kernels come from the BlockOps and
 * attention given; this module only wires them.
 */
import type { AttentionDocuments, AttentionGradients, BlockOps, LayerNormSaved, LocalAttention, RopePositions } from "@ulysses/kernels";
import type { Tensor } from "@ulysses/tensors";
import { LocalBlockAttention, type BlockAttention, type BlockAttentionContext } from "./block-attention.js";
import { resolveBlockConfig, type BlockConfig, type ResolvedBlockConfig } from "./block-config.js";
import { blockForward, type BlockMath, type LinearName, type NormName } from "./block-forward.js";
import { blockWeightSpecs, checkBlockWeights, FlatTensors, initBlockWeights, type BlockWeights } from "./block-weights.js";
import { BlockError } from "./errors.js";

type F32 = Tensor<"float32">;

export interface TransformerBlockOptions {
  ops: BlockOps;
  /** The local kernel to run attention with (or give `attention`). */
  localAttention?: LocalAttention;
  /** A ready BlockAttention (for example one shared by several blocks). */
  attention?: BlockAttention;
  /** Weights to use (not copied); default: `initBlockWeights(config, seed)`. */
  weights?: BlockWeights;
  /** Seed for the default weights (default 0). */
  seed?: number;
  /** Activation checkpointing: keep only the block input, recompute in backward. */
  checkpoint?: boolean;
}

export interface BlockForwardOptions {
  /** RoPE positions: the first token's (default 0), or every token's, int32 [b * s]. */
  positions?: RopePositions;
  /** Packed documents: each token's document id, int32 [b * s], non-decreasing per row; attention never crosses a document. */
  documents?: Int32Array;
}

/** What a forward was called with, kept for backward (and the recompute under checkpointing). */
interface Inputs {
  positions: RopePositions;
  documents: AttentionDocuments | undefined;
}

type NormSaved = LayerNormSaved | { rstd: F32 };

/** Everything the backward pass reads, as the recorder saw it. */
interface Activations {
  norms: Map<NormName, { x: F32; saved: NormSaved }>;
  /** The input of each linear layer. */
  inputs: Map<LinearName, F32>;
  attention: BlockAttentionContext;
  /** attention output [b, s, H, D] */
  attentionOut: F32;
  /** GELU: its input; SwiGLU: gate and up. */
  geluInput?: F32;
  gate?: F32;
  up?: F32;
}

/** What forward keeps for backward. */
export class BlockContext {
  constructor(
    readonly owner: TransformerBlock,
    /** Input [b, s, hidden]. */
    readonly input: F32,
    readonly inputs: Inputs,
    /** Null under activation checkpointing. */
    readonly activations: Activations | null,
  ) {}

  /** Bytes of the tensors this context keeps alive (the input included). */
  get savedBytes(): number {
    const a = this.activations;
    if (a === null) return this.input.byteLength;
    const tensors: F32[] = [this.input, ...a.inputs.values()];
    for (const { x, saved } of a.norms.values()) tensors.push(x, ...Object.values(saved));
    for (const t of [a.geluInput, a.gate, a.up]) if (t !== undefined) tensors.push(t);
    // each buffer once: reshaped views share their data (h1 feeds q, k and v; norm1's input is the block input)
    const buffers = new Set(tensors.map((t) => t.data));
    return [...buffers].reduce((n, d) => n + d.byteLength, 0) + a.attention.savedBytes;
  }
}

export interface BlockGradients {
  /** [b, s, hidden] */
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

/** Runs blockForward on tensors through the block's kernels, saving what backward reads. */
class Recorder implements BlockMath<F32> {
  readonly norms = new Map<NormName, { x: F32; saved: NormSaved }>();
  readonly inputs = new Map<LinearName, F32>();
  attentionContext: BlockAttentionContext | null = null;
  attentionOut: F32 | null = null;
  geluInput?: F32;
  gate?: F32;
  up?: F32;

  constructor(
    private readonly block: TransformerBlock,
    private readonly ops: BlockOps,
    private readonly batch: number,
    private readonly seq: number,
    private readonly call: Inputs,
    /** false: give the attention's buffers back as soon as they are used (checkpointing). */
    private readonly keep: boolean,
  ) {}

  async norm(x: F32, name: NormName): Promise<F32> {
    const { config, weights } = this.block;
    const gamma = weights[`${name}.gamma`]!;
    if (config.norm === "rmsnorm") {
      const { y, rstd } = await this.ops.rmsNormForward(x, gamma, config.eps);
      this.norms.set(name, { x, saved: { rstd } });
      return y;
    }
    const { y, mean, rstd } = await this.ops.layerNormForward(x, gamma, weights[`${name}.beta`]!, config.eps);
    this.norms.set(name, { x, saved: { mean, rstd } });
    return y;
  }

  async linear(x: F32, name: LinearName): Promise<F32> {
    const { config, weights } = this.block;
    this.inputs.set(name, x);
    const y = await this.ops.linearForward(x, weights[`${name}.w`]!, config.bias ? weights[`${name}.b`] : undefined);
    if (name === "attn.o" && !this.keep) this.block.attention.release(this.attentionContext!, this.attentionOut!);
    return y;
  }

  splitHeads(x: F32, heads: number): F32 {
    // [rows, n * D] -> [b, s, n, D]
    return x.reshape([this.batch, this.seq, heads, this.block.config.headDim]);
  }

  mergeHeads(x: F32): F32 {
    // [b, s, n, D] -> [rows, n * D]
    return x.reshape([this.batch * this.seq, x.shape[2]! * x.shape[3]!]);
  }

  rope(x: F32): Promise<F32> {
    return this.ops.ropeForward(x, this.call.positions, this.block.config.ropeBase);
  }

  async attention(q: F32, k: F32, v: F32): Promise<F32> {
    const { documents } = this.call;
    const options = documents === undefined ? { causal: this.block.config.causal } : { causal: this.block.config.causal, documents };
    const { out, context } = await this.block.attention.forward(q, k, v, options);
    this.attentionContext = context;
    this.attentionOut = out;
    return out;
  }

  async residual(a: F32, b: F32): Promise<F32> {
    return addInto(a, b);
  }

  gelu(x: F32): Promise<F32> {
    this.geluInput = x;
    return this.ops.geluForward(x);
  }

  swiglu(gate: F32, up: F32): Promise<F32> {
    this.gate = gate;
    this.up = up;
    return this.ops.swigluForward(gate, up);
  }

  activations(): Activations {
    const a: Activations = { norms: this.norms, inputs: this.inputs, attention: this.attentionContext!, attentionOut: this.attentionOut! };
    if (this.geluInput !== undefined) a.geluInput = this.geluInput;
    if (this.gate !== undefined) a.gate = this.gate;
    if (this.up !== undefined) a.up = this.up;
    return a;
  }
}

/** Checks the forward options against x [b, s, hidden]. */
function blockInputs(x: F32, options: BlockForwardOptions): Inputs {
  const positions = options.positions ?? 0;
  const tokens = x.shape[0]! * x.shape[1]!;
  if (typeof positions === "number") {
    if (!Number.isInteger(positions) || positions < 0)
      throw new BlockError(`TransformerBlock.forward: positions must be an integer >= 0 or an Int32Array, got ${positions}`);
  } else if (!(positions instanceof Int32Array) || positions.length !== tokens) {
    throw new BlockError(
      `TransformerBlock.forward: per-token positions must be an Int32Array of b * s = ${tokens} entries, got ${positions?.length ?? typeof positions}`,
    );
  }
  const ids = options.documents;
  if (ids === undefined) return { positions, documents: undefined };
  if (!(ids instanceof Int32Array) || ids.length !== tokens) {
    throw new BlockError(`TransformerBlock.forward: documents must be an Int32Array of b * s = ${tokens} document ids, got ${ids?.length ?? typeof ids}`);
  }
  // queries and keys are the same tokens on one device
  return { positions, documents: { query: ids, key: ids } };
}

export class TransformerBlock {
  readonly config: ResolvedBlockConfig;
  readonly weights: BlockWeights;
  /** The attention forward and backward call; sequence parallelism replaces it. */
  attention: BlockAttention;
  readonly checkpoint: boolean;
  private readonly ops: BlockOps;

  constructor(config: BlockConfig, options: TransformerBlockOptions) {
    this.config = resolveBlockConfig(config);
    this.ops = options.ops;
    this.checkpoint = options.checkpoint ?? false;
    if (options.attention !== undefined) {
      this.attention = options.attention;
    } else if (options.localAttention !== undefined) {
      this.attention = new LocalBlockAttention(options.localAttention);
    } else {
      throw new BlockError("TransformerBlock: give `localAttention` (a kernel) or `attention` (a BlockAttention)");
    }
    this.weights = options.weights ?? initBlockWeights(this.config, options.seed ?? 0);
    checkBlockWeights(this.config, this.weights);
  }

  /** x [b, s, hidden] -> y [b, s, hidden] and the context backward needs. */
  async forward(x: F32, options: BlockForwardOptions = {}): Promise<{ y: F32; context: BlockContext }> {
    const inputs = blockInputs(x, options);
    const { y, activations } = await this.run(x, inputs, !this.checkpoint);
    return { y, context: new BlockContext(this, x, inputs, this.checkpoint ? null : activations) };
  }

  /**
   * Gives a context's attention buffers back for reuse when backward will not
   * run (evaluation); the context is unusable afterwards. Backward does this
   * by itself.
   */
  release(context: BlockContext): void {
    const a = context.activations;
    if (context.owner === this && a !== null) this.attention.release(a.attention, a.attentionOut);
  }

  /** dy [b, s, hidden] -> dx and this input's weight gradients. */
  async backward(context: BlockContext, dy: F32): Promise<BlockGradients> {
    if (!(context instanceof BlockContext) || context.owner !== this)
      throw new BlockError("TransformerBlock.backward needs the context its own forward returned");
    if (context.activations?.attention.released === true)
      throw new BlockError("TransformerBlock.backward: the context was released (by release() or an earlier backward)");
    if (dy.rank !== 3 || dy.shape.some((d, i) => d !== context.input.shape[i])) {
      throw new BlockError(`TransformerBlock.backward: dy ${dy} does not match the input ${context.input}`);
    }
    const a = context.activations ?? (await this.run(context.input, context.inputs, true)).activations;
    const { hidden, heads, headDim, kvHeads, ropeBase } = this.config;
    const [b, s] = context.input.shape as unknown as [number, number, number];
    const rows = b * s;
    const positions = context.inputs.positions;
    const grads = new FlatTensors(blockWeightSpecs(this.config));
    const dOut = dy.reshape([rows, hidden]);
    const input = (name: LinearName) => a.inputs.get(name)!;

    // MLP: y = x2 + down(act).
    const dAct = await this.linearBackward(input("mlp.down"), "mlp.down", dOut, grads);
    let dh2: F32;
    if (this.config.mlp === "swiglu") {
      const { dGate, dUp } = await this.ops.swigluBackward(a.gate!, a.up!, dAct);
      dh2 = addInto(await this.linearBackward(input("mlp.gate"), "mlp.gate", dGate, grads), await this.linearBackward(input("mlp.up"), "mlp.up", dUp, grads));
    } else {
      const dUp = await this.ops.geluBackward(a.geluInput!, dAct);
      dh2 = await this.linearBackward(input("mlp.up"), "mlp.up", dUp, grads);
    }
    const dx2 = addInto(await this.normBackward("norm2", a, dh2, grads), dOut);

    // Attention: x2 = x + o @ Wo.
    const dAttn = await this.linearBackward(input("attn.o"), "attn.o", dx2, grads);
    // [rows, H*D] -> [b, s, H, D]
    const g: AttentionGradients = await this.attention.backward(a.attention, dAttn.reshape([b, s, heads, headDim]));
    const dq = await this.ops.ropeBackward(g.dq, positions, ropeBase);
    const dk = await this.ops.ropeBackward(g.dk, positions, ropeBase);
    // [b, s, H, D] -> [rows, H*D]; [b, s, Hkv, D] -> [rows, Hkv*D]
    const h1 = input("attn.q");
    const dh1 = addInto(
      await this.linearBackward(h1, "attn.q", dq.reshape([rows, heads * headDim]), grads),
      await this.linearBackward(h1, "attn.k", dk.reshape([rows, kvHeads * headDim]), grads),
      await this.linearBackward(h1, "attn.v", g.dv.reshape([rows, kvHeads * headDim]), grads),
    );
    const dx = addInto(await this.normBackward("norm1", a, dh1, grads), dx2);
    // The attention's buffers are spent: hand them back for the next step.
    this.attention.release(a.attention, a.attentionOut, g.dq, g.dk, g.dv);
    // [rows, hidden] -> [b, s, hidden]
    return { dx: dx.reshape([b, s, hidden]), grads: grads.tensors, flat: grads.flat };
  }

  /** The forward computation; `keep` false releases the attention's buffers as soon as they are used (checkpointing). */
  private async run(input: F32, inputs: Inputs, keep: boolean): Promise<{ y: F32; activations: Activations }> {
    const { hidden } = this.config;
    if (input.dtype !== "float32" || input.rank !== 3 || input.shape[2] !== hidden) {
      throw new BlockError(`TransformerBlock.forward: x must be float32 [batch, seq, ${hidden}], got ${input}`);
    }
    const [b, s] = input.shape as unknown as [number, number, number];
    const recorder = new Recorder(this, this.ops, b, s, inputs, keep);
    // [b, s, hidden] -> [rows, hidden] -> [b, s, hidden]
    const y = await blockForward(this.config, recorder, input.reshape([b * s, hidden]));
    return { y: y.reshape([b, s, hidden]), activations: recorder.activations() };
  }

  /** Writes dW (and db) into `grads`; returns dx. */
  private async linearBackward(x: F32, name: LinearName, dy: F32, grads: FlatTensors): Promise<F32> {
    const r = await this.ops.linearBackward(x, this.weights[`${name}.w`]!, dy, this.config.bias);
    grads.set(`${name}.w`, r.dw);
    if (this.config.bias) grads.set(`${name}.b`, r.db!);
    return r.dx;
  }

  private async normBackward(name: NormName, a: Activations, dy: F32, grads: FlatTensors): Promise<F32> {
    const { x, saved } = a.norms.get(name)!;
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
