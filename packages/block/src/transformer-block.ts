/**
 * TransformerBlock: one pre-norm transformer block, forward and backward,
 * plain one-device code. Its forward is `blockForward` (block-forward.ts)
 * run on tensors by a recorder that keeps what backward needs; backward is
 * written here and returns dx and the weight gradients. Positions are an
 * input (`positions`: the position of the first token, or of every token
 * when documents are packed, for RoPE), and so are the document boundaries
 * of packed sequences (`documents`: the attention masks across them). The
 * block never communicates and never reduces anything: sequence parallelism
 * (@ulysses/parallel) swaps its `attention` for a sharded one and sums the
 * gradients from outside. Kernels come from the BlockOps and attention
 * given; this module only wires them.
 *
 * Memory, for the peak of training:
 * - Activation checkpointing (`checkpoint`) keeps only x, and its forward
 *   records nothing (each intermediate dies once the next op has read it;
 *   the attention's buffers go back as soon as attn.o has read them).
 *   Backward recomputes only what it reads: the forward through the MLP's
 *   activation, never mlp.down nor the last residual; with a tiled MLP, up
 *   to x2 (the tiles recompute the rest).
 * - The tiled MLP (`mlpTileRows`, as in ALST) runs norm2 -> up (and gate) ->
 *   activation -> down -> residual over tiles of that many of the b * s rows
 *   and keeps only its input x2. Backward recomputes each tile's norm2, up
 *   (gate) and activation, runs the tile's backward and sums the tiles'
 *   weight gradients, so the [rows, mlpHidden] tensors exist for one tile at
 *   a time, forward and backward.
 * - Head groups (`attentionHeadGroups`, head-groups.ts) run the attention
 *   half one group of heads at a time and keep nothing of it: backward
 *   recomputes norm1 and, group by group, the projections and the attention
 *   before their backward, so q, k, v, the attention output and their
 *   gradients exist for H/G heads at a time. With `keepAttentionOutputs`
 *   each group's output and the attention's statistics are kept, and the
 *   backward rebuilds the attention's context from them and the projections
 *   instead of running the attention's forward again.
 * - Backward runs in stages (MLP, or its tiles; attn.o and the attention;
 *   RoPE and q, k, v; norm1), each returning only what the next one needs,
 *   and takes every saved tensor out of the context as it reads it: what a
 *   stage has consumed is unreachable, and a spent context holds only x.
 */
import type { AttentionGradients, BlockOps, RopePositions } from "@ulysses/kernels";
import { Tensor } from "@ulysses/tensors";
import { LocalBlockAttention, type BlockAttention } from "./block-attention.js";
import { hasBias, resolveBlockConfig, type BlockConfig, type ResolvedBlockConfig } from "./block-config.js";
import { attentionHalf, mlpActivation, mlpHalf, type LinearName, type NormName } from "./block-forward.js";
import { addWith, blockWeightSpecs, checkBlockWeights, FlatTensors, initBlockWeights, type BlockWeights, type QkNormName } from "./block-weights.js";
import { headNormBackward } from "./head-norm.js";
import { BlockError } from "./errors.js";
import { mlpComponent, type MlpComponent } from "./mlps.js";
import { normComponent, type NormComponent, type NormTensors } from "./norms.js";
import { inRowTiles, rowsOf } from "./row-tiles.js";
import { Activations, BlockContext, blockInputs, type BlockGradients, type Geometry, type KeptGroup, type NormRecord } from "./block-activations.js";
import { Recorder } from "./block-recorder.js";
import type { BlockBackwardOptions, BlockForwardOptions, TransformerBlockOptions } from "./block-options.js";

export type { BlockBackwardOptions, BlockForwardOptions, TransformerBlockOptions } from "./block-options.js";
import { checkHeadGroups, groupedAttentionBackward, groupedAttentionForward, headGroupTileRowsOf, type HeadGroupsCall } from "./head-groups.js";

type F32 = Tensor<"float32">;

export class TransformerBlock {
  readonly config: ResolvedBlockConfig;
  /** The config's norm, chosen once. */
  readonly norm: NormComponent;
  /** The config's MLP, chosen once. */
  readonly mlp: MlpComponent;
  /** Each norm's weights by suffix (views of `weights`, which are updated in place). */
  private readonly normTensors: Record<NormName, NormTensors>;
  readonly weights: BlockWeights;
  /** The attention forward and backward call; sequence parallelism replaces it. */
  attention: BlockAttention;
  readonly checkpoint: boolean;
  /** Rows per MLP tile; 0: the MLP runs on all rows at once. */
  readonly mlpTileRows: number;
  /** Head groups of the attention half; 1: all heads at once. */
  readonly attentionHeadGroups: number;
  /** Rows per tile of a head group's full-width terms. */
  readonly headGroupTileRows: number;
  /** TransformerBlockOptions.keepAttentionOutputs. */
  readonly keepAttentionOutputs: boolean;
  private readonly ops: BlockOps;

  constructor(config: BlockConfig, options: TransformerBlockOptions) {
    this.config = resolveBlockConfig(config);
    this.norm = normComponent(this.config.norm);
    this.mlp = mlpComponent(this.config.mlp);
    this.ops = options.ops;
    this.checkpoint = options.checkpoint ?? false;
    const tile = options.mlpTileRows ?? 0;
    if (typeof tile !== "number" || !Number.isInteger(tile) || tile < 0) {
      throw new BlockError(`TransformerBlock: mlpTileRows must be 0 (off) or a positive integer (rows of [b * s, hidden] per MLP tile), got ${String(tile)}`);
    }
    this.mlpTileRows = tile;
    if (options.attention !== undefined) {
      this.attention = options.attention;
    } else if (options.localAttention !== undefined) {
      this.attention = new LocalBlockAttention(options.localAttention);
    } else {
      throw new BlockError("TransformerBlock: give `localAttention` (a kernel) or `attention` (a BlockAttention)");
    }
    this.attentionHeadGroups = checkHeadGroups(options.attentionHeadGroups ?? 1, this.config);
    this.keepAttentionOutputs = options.keepAttentionOutputs ?? false;
    if (this.keepAttentionOutputs && (this.attentionHeadGroups === 1 || this.checkpoint))
      throw new BlockError(
        `TransformerBlock: keepAttentionOutputs keeps the outputs of attention in head groups for backward: it needs attentionHeadGroups > 1 (got ${this.attentionHeadGroups}) and no checkpointing (checkpoint ${this.checkpoint})`,
      );
    const groupTile = options.headGroupTileRows ?? headGroupTileRowsOf(this.config.hidden);
    if (typeof groupTile !== "number" || !Number.isInteger(groupTile) || groupTile < 1) {
      throw new BlockError(
        `TransformerBlock: headGroupTileRows must be a positive integer (rows per tile of a head group's full-width terms), got ${String(groupTile)}`,
      );
    }
    this.headGroupTileRows = groupTile;
    this.weights = options.weights ?? initBlockWeights(this.config, options.seed ?? 0);
    checkBlockWeights(this.config, this.weights);
    const normTensors = (name: NormName): NormTensors =>
      Object.fromEntries(this.norm.weights.map(({ suffix }) => [suffix, this.weights[`${name}.${suffix}`]!]));
    this.normTensors = { norm1: normTensors("norm1"), norm2: normTensors("norm2") };
  }

  /** x [b, s, hidden] -> y [b, s, hidden] and the context backward needs. */
  async forward(x: F32, options: BlockForwardOptions = {}): Promise<{ y: F32; context: BlockContext }> {
    const inputs = blockInputs(x, options);
    const { hidden } = this.config;
    if (x.dtype !== "float32" || x.rank !== 3 || x.shape[2] !== hidden) {
      throw new BlockError(`TransformerBlock.forward: x must be float32 [batch, seq, ${hidden}], got ${x}`);
    }
    const [b, s] = x.shape as unknown as [number, number, number];
    // checkpointing saves nothing: each intermediate dies once the next op has read it
    const saved = this.checkpoint ? null : new Activations();
    const geometry = { batch: b, seq: s, call: inputs };
    const math = new Recorder(this, this.ops, saved, geometry);
    // [b, s, hidden] -> [rows, hidden] -> [b, s, hidden]; blockForward's two halves
    const x2 = await this.attentionHalf(math, x.reshape([b * s, hidden]), geometry, saved);
    const y = this.mlpTileRows > 0 ? await this.tiledMlpForward(x2, saved) : await mlpHalf(this.config, math, x2);
    return { y: y.reshape([b, s, hidden]), context: new BlockContext(this, x, inputs, saved) };
  }

  /**
   * Gives a context's attention buffers back for reuse when backward will not
   * run (evaluation), and drops what it saved; the context is unusable
   * afterwards. Backward does this by itself.
   */
  release(context: BlockContext): void {
    const a = context.activations;
    if (context.owner !== this || a === null || a.spent) return;
    a.spent = true;
    a.releaseAttention(this.attention);
    a.clear();
  }

  /** dy [b, s, hidden] -> dx and this input's weight gradients. */
  async backward(context: BlockContext, dy: F32, options: BlockBackwardOptions = {}): Promise<BlockGradients> {
    if (!(context instanceof BlockContext) || context.owner !== this)
      throw new BlockError("TransformerBlock.backward needs the context its own forward returned");
    const kept = context.activations;
    if (kept !== null && (kept.spent || kept.attention?.released === true))
      throw new BlockError("TransformerBlock.backward: the context was released (by release() or an earlier backward)");
    if (dy.rank !== 3 || dy.shape.some((d, i) => d !== context.input.shape[i])) {
      throw new BlockError(`TransformerBlock.backward: dy ${dy} does not match the input ${context.input}`);
    }
    if (kept !== null) kept.spent = true;
    const a = kept ?? (await this.recompute(context));
    const { hidden } = this.config;
    const [b, s] = context.input.shape as unknown as [number, number, number];
    const grads = new FlatTensors(blockWeightSpecs(this.config));
    const dOut = dy.reshape([b * s, hidden]);
    const into = options.overwriteDy === true;
    const dx2 = this.mlpTileRows > 0 ? await this.tiledMlpBackward(a.takeMlpInput(), dOut, grads, into) : await this.mlpBackward(a, dOut, grads, into, true);
    const dx =
      this.attentionHeadGroups > 1
        ? await this.groupedBackward(context.input.reshape([b * s, hidden]), dx2, { batch: b, seq: s, call: context.inputs }, grads, a.takeGroups())
        : await this.attentionBackward(a, dx2, [b, s], context.inputs.positions, grads);
    // dx2 has been added into dx: unless it is dy's buffer (the caller's), it goes back to the ops
    if (dx2.data.buffer !== dOut.data.buffer && dx2.data.buffer !== dx.data.buffer) this.ops.release?.(dx2);
    // [rows, hidden] -> [b, s, hidden]
    return { dx: dx.reshape([b, s, hidden]), grads: grads.tensors, flat: grads.flat };
  }

  /**
   * Checkpointing: the forward again, only as far as backward reads it:
   * through the MLP's activation (never mlp.down nor the last residual), or
   * up to x2 with a tiled MLP (whose backward recomputes its tiles).
   */
  private async recompute(context: BlockContext): Promise<Activations> {
    const { input, inputs } = context;
    const [b, s, hidden] = input.shape as unknown as [number, number, number];
    const a = new Activations();
    const geometry = { batch: b, seq: s, call: inputs };
    const math = new Recorder(this, this.ops, a, geometry);
    const x2 = await this.attentionHalf(math, input.reshape([b * s, hidden]), geometry, null);
    if (this.mlpTileRows > 0) a.mlpInput = x2;
    else a.inputs.set("mlp.down", await mlpActivation(this.config, math, x2));
    return a;
  }

  /** x [rows, hidden] -> x2: attentionHalf recorded by `math`, or in head groups (which record nothing but, when kept, their outputs in `saved`). */
  private async attentionHalf(math: Recorder, x: F32, geometry: Geometry, saved: Activations | null): Promise<F32> {
    if (this.attentionHeadGroups === 1) return attentionHalf(this.config, math, x);
    const h1 = await new Recorder(this, this.ops, null, geometry).norm(x, "norm1");
    const keep = this.keepAttentionOutputs && saved !== null ? saved.keepGroups() : null;
    return groupedAttentionForward(this.headGroupsCall(geometry), this.attentionHeadGroups, x, h1, keep);
  }

  /** Head groups: dx2 -> dx, the residual term included; norm1 and every group recomputed from x (each group's output kept, when `kept`). */
  private async groupedBackward(x: F32, dx2: F32, geometry: Geometry, grads: FlatTensors, kept: KeptGroup[] | null): Promise<F32> {
    const a = new Activations();
    const h1 = await new Recorder(this, this.ops, a, geometry).norm(x, "norm1");
    const dh1 = await groupedAttentionBackward(this.headGroupsCall(geometry), this.attentionHeadGroups, h1, dx2, grads, kept);
    return addWith(this.ops, await this.normBackwardSpending("norm1", a.takeNorm("norm1"), dh1, grads), dx2);
  }

  private headGroupsCall({ batch, seq, call }: Geometry): HeadGroupsCall {
    const { config, weights, ops, attention } = this;
    const { positions, documents, run } = call;
    return { config, weights, ops, attention, batch, seq, positions, documents, run, tileRows: this.headGroupTileRows };
  }

  /** The MLP half tile by tile over x2's rows, saving (when `saved`) only x2. */
  private async tiledMlpForward(x2: F32, saved: Activations | null): Promise<F32> {
    if (saved !== null) saved.mlpInput = x2;
    const [rows, hidden] = x2.shape as unknown as [number, number];
    const y = new Tensor("float32", [rows, hidden]);
    const math = new Recorder(this, this.ops, null, null);
    await inRowTiles(rows, this.mlpTileRows, async (start, count) => {
      const tile = await mlpHalf(this.config, math, rowsOf(x2, start, count));
      y.data.set(tile.data, start * hidden);
      this.ops.release?.(tile);
    });
    return y;
  }

  /** The tiled MLP's backward: dy -> dx2 (the residual term included; in dy's buffer when `into`), the tiles' weight gradients summed into `grads`. */
  private async tiledMlpBackward(x2: F32, dy: F32, grads: FlatTensors, into: boolean): Promise<F32> {
    const [rows, hidden] = x2.shape as unknown as [number, number];
    const dx2 = into ? dy : new Tensor("float32", [rows, hidden]);
    await inRowTiles(rows, this.mlpTileRows, async (start, count) => {
      // a tile reads only its own rows of dy, so its dx2 may take their place
      const tile = await this.mlpTileBackward(rowsOf(x2, start, count), rowsOf(dy, start, count), grads, into);
      if (!into) {
        dx2.data.set(tile.data, start * hidden);
        this.ops.release?.(tile);
      }
    });
    this.ops.release?.(x2);
    return dx2;
  }

  /** One tile: recompute norm2, up (and gate) and the activation on its rows of x2, then their backward (weight gradients added). */
  private async mlpTileBackward(x2: F32, dy: F32, grads: FlatTensors, into: boolean): Promise<F32> {
    const a = new Activations();
    a.inputs.set("mlp.down", await mlpActivation(this.config, new Recorder(this, this.ops, a, null), x2));
    return this.mlpBackward(a, dy, grads, into, false);
  }

  /**
   * MLP: y = x2 + down(act(norm2(x2))); dy -> dx2, the residual term
   * included (added into dy itself when `into`); the weight gradients are
   * added into `grads` (a tiled MLP sums its tiles'). `releaseX2`: x2 goes
   * back to the ops afterwards (the whole x2, not a tile's rows).
   */
  private async mlpBackward(a: Activations, dy: F32, grads: FlatTensors, into: boolean, releaseX2: boolean): Promise<F32> {
    // Each stage's result goes straight into the next (no local holds it), and what a stage has read for the last time goes
    // back to the ops (BlockOps.release) for later outputs of its size: dAct in activationBackward, dUp and dGate in upBackward.
    const act = a.takeInput("mlp.down");
    const dAct = await this.linearBackward(act, "mlp.down", dy, grads);
    this.ops.release?.(act);
    const dh2 = await this.upBackward(a, await this.activationBackward(a, dAct), grads);
    const norm2 = a.takeNorm("norm2");
    const dNorm = await this.normBackward("norm2", norm2, dh2, grads);
    // x2 too, read for the last time, unless it is a tile's rows (tiledMlpBackward releases the whole)
    this.ops.release?.(dh2, ...(releaseX2 ? [norm2.x] : []));
    if (!into) return addWith(this.ops, dNorm, dy);
    addWith(this.ops, dy, dNorm);
    this.ops.release?.(dNorm);
    return dy;
  }

  /** dAct -> the gradients of the MLP projections' outputs (the component's order); dAct and the saved outputs are released. */
  private async activationBackward(a: Activations, dAct: F32): Promise<F32[]> {
    const inputs = this.mlp.projections.map((_, i) => a.takeMlp(i));
    const d = await this.mlp.backward(this.ops, inputs, dAct);
    this.ops.release?.(...inputs, dAct);
    return d;
  }

  /** The projections' output gradients -> dh2 (h2 feeds every projection; released after the last). mlp.up's first, then the others'. */
  private async upBackward(a: Activations, d: F32[], grads: FlatTensors): Promise<F32> {
    const { projections } = this.mlp;
    const last = projections.length - 1;
    const h2 = a.takeInput(projections[last]!);
    const dh2 = await this.linearBackward(h2, projections[last]!, d[last]!, grads);
    this.ops.release?.(d[last]!);
    const spent = new Set([h2]);
    for (let i = last - 1; i >= 0; i--) {
      const input = a.takeInput(projections[i]!);
      addWith(this.ops, dh2, await this.linearBackward(input, projections[i]!, d[i]!, grads));
      spent.add(input).add(d[i]!);
    }
    this.ops.release?.(...spent);
    return dh2;
  }

  /** Attention: x2 = x + o @ Wo; dx2 -> dx, the residual term included. */
  private async attentionBackward(a: Activations, dx2: F32, shape: [number, number], positions: RopePositions, grads: FlatTensors): Promise<F32> {
    // the attention's gradients go straight into qkvBackward, which hands them back
    const dh1 = await this.qkvBackward(a, await this.outputBackward(a, dx2, shape, grads), positions, grads);
    return addWith(this.ops, await this.normBackwardSpending("norm1", a.takeNorm("norm1"), dh1, grads), dx2);
  }

  /** attn.o and the attention: dx2 -> dq, dk, dv. */
  private async outputBackward(a: Activations, dx2: F32, [b, s]: [number, number], grads: FlatTensors): Promise<AttentionGradients> {
    const { heads, headDim } = this.config;
    // [rows, H*D] -> [b, s, H, D]
    const dAttn = (await this.linearBackward(a.takeInput("attn.o"), "attn.o", dx2, grads)).reshape([b, s, heads, headDim]);
    const g = await this.attention.backward(a.savedAttention(), dAttn);
    // read for the last time (unless the attention handed it back as a gradient)
    if (![g.dq, g.dk, g.dv].some((t) => t.data.buffer === dAttn.data.buffer)) this.ops.release?.(dAttn);
    return g;
  }

  /** RoPE (and the per-head q/k norms) and q, k, v: the attention's gradients -> dh1; then hands the attention's buffers back. */
  private async qkvBackward(a: Activations, g: AttentionGradients, positions: RopePositions, grads: FlatTensors): Promise<F32> {
    const { heads, kvHeads, headDim, ropeBase, ropeScaling, qkNorm } = this.config;
    const rows = g.dq.shape[0]! * g.dq.shape[1]!;
    // each rotated (and normalised) gradient goes back to the ops as soon as the next stage has read it (unless it is the
    // attention's own: the ops rotated in place)
    const spend = (t: F32, ...keep: F32[]) => {
      if (keep.every((k) => k.data.buffer !== t.data.buffer)) this.ops.release?.(t);
    };
    const projectionBackward = async (x: F32, name: "attn.q" | "attn.k", d: F32, width: number) => {
      let dProjection = await this.ops.ropeBackward(d, positions, ropeBase, ropeScaling);
      if (qkNorm) {
        const rotated = dProjection;
        dProjection = await this.headNormBackward(a, name === "attn.q" ? "attn.q_norm" : "attn.k_norm", rotated, grads);
        spend(rotated, d, dProjection);
      }
      // [b, s, n, D] -> [rows, n * D]
      const dx = await this.linearBackward(x, name, dProjection.reshape([rows, width]), grads);
      spend(dProjection, d);
      return dx;
    };
    const inputs = [a.takeInput("attn.q"), a.takeInput("attn.k"), a.takeInput("attn.v")] as const;
    const dq = await projectionBackward(inputs[0], "attn.q", g.dq, heads * headDim);
    const dk = await projectionBackward(inputs[1], "attn.k", g.dk, kvHeads * headDim);
    const dv = await this.linearBackward(inputs[2], "attn.v", g.dv.reshape([rows, kvHeads * headDim]), grads);
    // The attention's buffers are spent: hand them back for the next step; dk, dv (once summed) and the inputs (h1, which feeds
    // q, k and v) go back to the ops.
    a.releaseAttention(this.attention, g.dq, g.dk, g.dv);
    addWith(this.ops, dq, dk, dv);
    this.ops.release?.(dk, dv, ...new Set(inputs));
    return dq;
  }

  /** qkNorm: the gradient at a per-head norm's output [b, s, n, D] -> at its input (the projection's output); the gain's gradient added. */
  private async headNormBackward(a: Activations, name: QkNormName, dy: F32, grads: FlatTensors): Promise<F32> {
    const record = a.takeHeadNorm(name);
    const { dx, dGamma } = await headNormBackward(this.ops, record, this.weights[`${name}.gamma`]!, dy);
    grads.add(`${name}.gamma`, dGamma, this.ops);
    this.ops.release?.(dGamma, record.x);
    return dx;
  }

  /** Adds dW and db into `grads` (its views start at zero); returns dx. */
  private async linearBackward(x: F32, name: LinearName, dy: F32, grads: FlatTensors): Promise<F32> {
    const bias = hasBias(this.config, name);
    const r = await this.ops.linearBackward(x, this.weights[`${name}.w`]!, dy, bias);
    grads.add(`${name}.w`, r.dw, this.ops);
    this.ops.release?.(r.dw);
    if (bias) {
      grads.add(`${name}.b`, r.db!, this.ops);
      this.ops.release?.(r.db!);
    }
    return r.dx;
  }

  /** normBackward, then dy (read for the last time) goes back to the ops. */
  private async normBackwardSpending(name: NormName, record: NormRecord, dy: F32, grads: FlatTensors): Promise<F32> {
    const dx = await this.normBackward(name, record, dy, grads);
    if (dx.data.buffer !== dy.data.buffer) this.ops.release?.(dy);
    return dx;
  }

  private async normBackward(name: NormName, { x, saved }: NormRecord, dy: F32, grads: FlatTensors): Promise<F32> {
    const r = await this.norm.backward(this.ops, x, this.normWeights(name), saved, dy);
    const spent = this.norm.weights.map(({ suffix }) => {
      grads.add(`${name}.${suffix}`, r.grads[suffix]!, this.ops);
      return r.grads[suffix]!;
    });
    this.ops.release?.(...spent);
    return r.dx;
  }

  /** The weights of norm `name` by suffix (gamma, beta), resolved once in the constructor. */
  normWeights(name: NormName): NormTensors {
    return this.normTensors[name];
  }
}
