/**
 * The attention half of a TransformerBlock run over groups of heads
 * (`attentionHeadGroups`, G): group g's q, k, v projections (the weights'
 * columns of its heads), RoPE, the attention and its share of the output
 * projection (the rows of Wo of its heads) run one group at a time (the
 * q, k, v biases' entries of its heads; qkNorm's per-head norms, whose gains
 * are shared by all groups and get the sum of their gradients), and the
 * group's contributions are summed into x2. So q, k, v, the attention output,
 * their gradients and a sharded attention's exchange buffers exist for H/G
 * heads at a time, forward and backward; what spans the whole width is x,
 * h1 = norm1(x), x2 and, in backward, dx2 and dh1.
 *
 * Nothing of a group survives it: backward recomputes each group's
 * projections and attention forward before its backward (so the attention's
 * forward runs twice per step, three times under activation checkpointing,
 * whose recompute of the block runs it once more to rebuild x2). Unless the
 * forward is given a list to keep the groups' outputs in (the block's
 * keepAttentionOutputs): then each group's output and the attention's
 * statistics survive (BlockAttention.keepOutput), and backward makes only
 * the projections again and rebuilds the attention's context from them
 * (BlockAttention.restore), so the attention's forward runs once. The math is
 * blockForward's attentionHalf with the sums over heads split into G partial
 * sums (heads are independent until Wo), so results equal the ungrouped block
 * within float rounding; ONNX export keeps
 * the ungrouped definition. Group g holds query heads [g H/G, (g+1) H/G) and
 * kv heads [g Hkv/G, (g+1) Hkv/G): G divides both head counts, so the
 * grouped-query mapping stays inside the group.
 */
import type { AttentionDocuments, BlockOps, RopePositions } from "@ulysses/kernels";
import { narrow, Tensor } from "@ulysses/tensors";
import type { BlockAttention, BlockAttentionOptions } from "./block-attention.js";
import { hasBias, type ResolvedBlockConfig } from "./block-config.js";
import type { KeptGroup, NormRecord } from "./block-activations.js";
import { headNormBackward, headNormForward } from "./head-norm.js";
import { addWith, type BlockWeights, type FlatTensors } from "./block-weights.js";
import { BlockError } from "./errors.js";
import { inRowTiles, rowsOf } from "./row-tiles.js";

type F32 = Tensor<"float32">;

/** What a grouped attention half reads of its block and of the call. */
export interface HeadGroupsCall {
  config: ResolvedBlockConfig;
  weights: BlockWeights;
  ops: BlockOps;
  attention: BlockAttention;
  batch: number;
  seq: number;
  positions: RopePositions;
  documents: AttentionDocuments | undefined;
  /** The forward's attentionRun (BlockAttentionOptions.run). */
  run: unknown;
  /** Rows per tile of a group's full-width terms (x2's in forward, dh1's in backward). */
  tileRows: number;
}

/** Checks a head-group count against the config (a BlockError naming the values). */
export function checkHeadGroups(groups: unknown, config: ResolvedBlockConfig): number {
  if (typeof groups !== "number" || !Number.isInteger(groups) || groups < 1) {
    throw new BlockError(`TransformerBlock: attentionHeadGroups must be a positive integer (1: off), got ${String(groups)}`);
  }
  if (config.heads % groups !== 0 || config.kvHeads % groups !== 0) {
    throw new BlockError(
      `TransformerBlock: attentionHeadGroups ${groups} must divide both heads (${config.heads}) and kvHeads (${config.kvHeads}), so each group keeps its kv heads`,
    );
  }
  return groups;
}

/** Tensors of `rowCount` rows each ([rows, c_i], or [b, s, n_i, D] read as [b * s, n_i * D]) side by side: [rows, sum c_i]. */
function sideBySide(rowCount: number, parts: readonly F32[]): F32 {
  const widths = parts.map((t) => t.size / rowCount);
  const total = widths.reduce((a, b) => a + b, 0);
  const t = new Tensor("float32", [rowCount, total]);
  for (let r = 0; r < rowCount; r++) {
    let at = r * total;
    parts.forEach((p, i) => {
      t.data.set(p.data.subarray(r * widths[i]!, (r + 1) * widths[i]!), at);
      at += widths[i]!;
    });
  }
  return t;
}

/**
 * The default rows per tile of a group's full-width terms ([tile rows, hidden]:
 * its share of x2 in forward, of dh1 in backward), so that no such term
 * exists for the whole sequence: the rows of 4 MiB, the trainer's automatic
 * tile size (TransformerBlock headGroupTileRows; the trainer's memory account).
 */
export function headGroupTileRowsOf(hidden: number): number {
  return Math.max(1, Math.floor((4 * 1024 * 1024) / (4 * hidden)));
}

/** Elements [start, start + count) of a vector, as a view. */
function part(b: F32, start: number, count: number): F32 {
  return new Tensor("float32", [count], b.data.subarray(start, start + count));
}

/** Adds `value` [r, c] into the [R, C] gradient `name` at (row, col). */
function addBlock(grads: FlatTensors, name: string, value: F32, row: number, col: number): void {
  const t = grads.tensors[name];
  if (t === undefined) throw new BlockError(`head groups: no gradient '${name}'`);
  const width = t.shape[t.rank - 1]!;
  const [r, c] = value.rank === 2 ? (value.shape as unknown as [number, number]) : [1, value.size];
  for (let i = 0; i < r; i++) {
    const to = (row + i) * width + col;
    for (let j = 0; j < c; j++) t.data[to + j]! += value.data[i * c + j]!;
  }
}

/** Group g's slices: query columns [qStart, qStart + qWidth), kv columns [kvStart, kvStart + kvWidth). */
interface Slice {
  heads: number;
  kvHeads: number;
  qStart: number;
  qWidth: number;
  kvStart: number;
  kvWidth: number;
}

function sliceOf(config: ResolvedBlockConfig, groups: number, g: number): Slice {
  const heads = config.heads / groups;
  const kvHeads = config.kvHeads / groups;
  const qWidth = heads * config.headDim;
  const kvWidth = kvHeads * config.headDim;
  return { heads, kvHeads, qStart: g * qWidth, qWidth, kvStart: g * kvWidth, kvWidth };
}

/** What a group's projections keep for their backward: qkNorm's records of q and k (their inputs and statistics). */
interface Projected {
  q: F32;
  k: F32;
  v: F32;
  norms: { q: NormRecord; k: NormRecord } | null;
}

/**
 * h1 [rows, hidden] -> this group's q [b, s, h, D] and k [b, s, k, D] (per-head
 * norms and RoPE applied) and v [b, s, k, D]: the weights' columns and the
 * biases' entries of its heads; the per-head norms' gains are shared by all heads.
 */
async function project(c: HeadGroupsCall, s: Slice, h1: F32): Promise<Projected> {
  const { config, weights, ops } = c;
  const linear = (name: "attn.q" | "attn.k" | "attn.v", start: number, width: number) =>
    ops.linearForward(h1, narrow(weights[`${name}.w`]!, 1, start, width), hasBias(config, name) ? part(weights[`${name}.b`]!, start, width) : undefined);
  // [rows, n * D] -> [b, s, n, D]
  const heads = (t: F32, n: number) => t.reshape([c.batch, c.seq, n, config.headDim]);
  let q = heads(await linear("attn.q", s.qStart, s.qWidth), s.heads);
  let k = heads(await linear("attn.k", s.kvStart, s.kvWidth), s.kvHeads);
  let norms: Projected["norms"] = null;
  if (config.qkNorm) {
    const qn = await headNormForward(ops, q, weights["attn.q_norm.gamma"]!, config.eps);
    const kn = await headNormForward(ops, k, weights["attn.k_norm.gamma"]!, config.eps);
    [q, k, norms] = [qn.y, kn.y, { q: qn.record, k: kn.record }];
  }
  q = await ops.ropeForward(q, c.positions, config.ropeBase, config.ropeScaling);
  k = await ops.ropeForward(k, c.positions, config.ropeBase, config.ropeScaling);
  const v = heads(await linear("attn.v", s.kvStart, s.kvWidth), s.kvHeads);
  return { q, k, v, norms };
}

function attentionOptions(c: HeadGroupsCall): BlockAttentionOptions {
  const options: BlockAttentionOptions = { causal: c.config.causal };
  if (c.documents !== undefined) options.documents = c.documents;
  if (c.run !== undefined) options.run = c.run;
  return options;
}

/**
 * Group s's projections and attention forward. Its q, k, v die with this
 * call: a sharded attention keeps its own (exchanged) copies in the context,
 * so the rank's own-layout ones are garbage once it returns.
 */
async function attend(c: HeadGroupsCall, s: Slice, h1: F32) {
  const { q, k, v, norms } = await project(c, s, h1);
  return { ...(await c.attention.forward(q, k, v, attentionOptions(c))), norms };
}

/**
 * x [rows, hidden] and h1 = norm1(x) -> x2 = x + attention(h1) @ Wo, one head
 * group at a time; keeps nothing, or, given `keep`, pushes each group's output
 * and the attention's statistics onto it (the attention must have keepOutput).
 */
export async function groupedAttentionForward(c: HeadGroupsCall, groups: number, x: F32, h1: F32, keep: KeptGroup[] | null = null): Promise<F32> {
  const { config, weights, ops } = c;
  if (keep !== null && (c.attention.keepOutput === undefined || c.attention.restore === undefined))
    throw new BlockError(
      `TransformerBlock: keepAttentionOutputs needs an attention that keeps its output and restores its context (keepOutput, restore); ${c.attention.name} does not`,
    );
  const x2 = new Tensor("float32", x.shape, Float32Array.from(x.data));
  for (let g = 0; g < groups; g++) {
    const s = sliceOf(config, groups, g);
    const { out, context } = await attend(c, s, h1);
    // [b, s, h, D] -> [rows, h * D]; the bias of Wo is added once, with group 0
    const outRows = out.reshape([c.batch * c.seq, s.qWidth]);
    const wo = rowsOf(weights["attn.o.w"]!, s.qStart, s.qWidth);
    const bias = hasBias(config, "attn.o") && g === 0 ? weights["attn.o.b"] : undefined;
    await inRowTiles(c.batch * c.seq, c.tileRows, async (start, count) =>
      addWith(ops, rowsOf(x2, start, count), await ops.linearForward(rowsOf(outRows, start, count), wo, bias)),
    );
    if (keep === null) c.attention.release(context, out);
    else keep.push({ out, kept: c.attention.keepOutput!(context) });
  }
  return x2;
}

/** Group s's attention again for its backward: its projections, then the attention's forward, or (`kept`) its context rebuilt from the kept output. */
async function attendAgain(c: HeadGroupsCall, s: Slice, h1: F32, kept: KeptGroup | undefined) {
  if (kept === undefined) return attend(c, s, h1);
  const { q, k, v, norms } = await project(c, s, h1);
  return { out: kept.out, context: await c.attention.restore!(kept.kept, q, k, v, kept.out), norms };
}

/**
 * The backward of group s's share of Wo: dWo_g = out_g^T dx2 (and Wo's bias
 * gradient, the sum of dx2, once, with group 0) into `grads`; returns
 * dOut = dx2 Wo_g^T as [b, s, h, D].
 */
async function outputBackward(c: HeadGroupsCall, s: Slice, g: number, out: F32, dx2: F32, grads: FlatTensors): Promise<F32> {
  const { config, weights, ops } = c;
  const o = await ops.linearBackward(
    out.reshape([c.batch * c.seq, s.qWidth]),
    rowsOf(weights["attn.o.w"]!, s.qStart, s.qWidth),
    dx2,
    hasBias(config, "attn.o") && g === 0,
  );
  addBlock(grads, "attn.o.w", o.dw, s.qStart, 0);
  if (o.db !== undefined) addBlock(grads, "attn.o.b", o.db, 0, 0);
  return o.dx.reshape([c.batch, c.seq, s.heads, config.headDim]);
}

/**
 * dx2 -> dh1 (the gradient at norm1's output), one head group at a time:
 * each group's projections and attention forward again (or, with `kept`,
 * the forward's groups, the attention's context rebuilt), then the backward
 * of its share of Wo, of the attention, RoPE and its q, k, v columns; the
 * weight gradients go into their columns (rows of Wo) of `grads`.
 */
export async function groupedAttentionBackward(
  c: HeadGroupsCall,
  groups: number,
  h1: F32,
  dx2: F32,
  grads: FlatTensors,
  kept: KeptGroup[] | null = null,
): Promise<F32> {
  if (kept !== null && kept.length !== groups) throw new BlockError(`head groups: backward needs the ${groups} groups' kept outputs, got ${kept.length}`);
  const { config, weights, ops } = c;
  const rowCount = c.batch * c.seq;
  const dh1 = new Tensor("float32", h1.shape);
  // q, k and v have biases together or not at all (BlockConfig.attentionBias)
  const qkvBias = config.attentionBias !== "none";
  for (let g = 0; g < groups; g++) {
    const s = sliceOf(config, groups, g);
    const { out, context, norms } = await attendAgain(c, s, h1, kept?.[g]);
    const a = await c.attention.backward(context, await outputBackward(c, s, g, out, dx2, grads));
    // RoPE's backward, then (qkNorm) the per-head norms' (their gains' gradients summed over the groups)
    const unrotate = async (d: F32, name: "attn.q_norm" | "attn.k_norm", record: NormRecord | undefined) => {
      const rotated = await ops.ropeBackward(d, c.positions, config.ropeBase, config.ropeScaling);
      if (record === undefined) return rotated;
      const r = await headNormBackward(ops, record, weights[`${name}.gamma`]!, rotated);
      addBlock(grads, `${name}.gamma`, r.dGamma, 0, 0);
      return r.dx;
    };
    // q, k and v in one linear backward against the group's columns side by side: one [rows, hidden] dh1 term per group
    const dqkv = sideBySide(rowCount, [await unrotate(a.dq, "attn.q_norm", norms?.q), await unrotate(a.dk, "attn.k_norm", norms?.k), a.dv]);
    c.attention.release(context, out, a.dq, a.dk, a.dv);
    const parts = [
      { name: "attn.q", start: s.qStart, width: s.qWidth },
      { name: "attn.k", start: s.kvStart, width: s.kvWidth },
      { name: "attn.v", start: s.kvStart, width: s.kvWidth },
    ] as const;
    const wqkv = sideBySide(
      h1.shape[1]!,
      parts.map((p) => narrow(weights[`${p.name}.w`]!, 1, p.start, p.width)),
    );
    // row tile by row tile, so the group's [rows, hidden] term of dh1 exists for one tile at a time
    await inRowTiles(rowCount, c.tileRows, async (start, count) => {
      const r = await ops.linearBackward(rowsOf(h1, start, count), wqkv, rowsOf(dqkv, start, count), qkvBias);
      addWith(ops, rowsOf(dh1, start, count), r.dx);
      let at = 0;
      for (const p of parts) {
        addBlock(grads, `${p.name}.w`, narrow(r.dw, 1, at, p.width), 0, p.start);
        if (qkvBias) addBlock(grads, `${p.name}.b`, part(r.db!, at, p.width), 0, p.start);
        at += p.width;
      }
    });
  }
  return dh1;
}
