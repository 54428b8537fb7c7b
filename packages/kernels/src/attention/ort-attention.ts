/**
 * OrtAttention: memory-efficient attention (forward and backward) as ONNX
 * graphs run by onnxruntime-node, FlashAttention-style but blocked over
 * queries only. Per (query block, batch, kv head) one session run computes
 * the block's scores against the keys it attends ([group * rows, keys], never
 * seq x seq), the softmax, and the outputs; causal blocks stop at their
 * diagonal, so fully masked keys are skipped rather than masked. Backward
 * recomputes P from logSumExp block by block and accumulates dk/dv in two
 * ping-pong buffers through Gemm's C input (outputs are written into
 * pre-allocated memory, nothing is allocated per run).
 *
 * Peak extra memory: a few copies of q/k/v-sized tensors plus ONNX Runtime's
 * per-run intermediates, O(rows · seqK) floats. Which graphs run is decided
 * in `block-graphs.ts`, which queries and keys in `block-plan.ts`; threads
 * come from the SessionCache.
 */
import { Tensor, permuteInto } from "@ulysses/tensors";
import { KernelError } from "../errors.js";
import { SessionCache } from "../runtime/session-cache.js";
import { buildBackwardGraph, buildForwardGraph, blockGraphKey, type BlockShape, type BlockVariant } from "./block-graphs.js";
import { gatherQueries, gatherRowValues, planBlocks, scatterQueries, scatterRowValues, type BlockPlan, type QueryBlock } from "./block-plan.js";
import { runInto } from "./run-into.js";
import { attentionDims, checkBackwardShapes, type AttentionDims } from "./shapes.js";
import type { AttentionForwardResult, AttentionGradients, AttentionOptions, LocalAttention } from "./types.js";

export interface OrtAttentionOptions {
  /** Sessions and threads (default: a new SessionCache with its default threads). */
  cache?: SessionCache;
  /** Query rows per session run, over the kv head's whole query group (default 128). */
  blockRows?: number;
}

/** One run's place: its block, batch index, kv head, and offsets into the blocked and kv layouts. */
interface RunSite {
  block: QueryBlock;
  variant: BlockVariant;
  /** First row of the run in the blocked query layout. */
  row: number;
  /** Rows of the run: group * block.rows. */
  rows: number;
  /** Float offset of the kv head in the [batch, kvHeads, seqK, headDim] layout. */
  kvBase: number;
}

function view(data: Float32Array, start: number, shape: number[]): Tensor<"float32"> {
  const length = shape.reduce((a, b) => a * b, 1);
  return new Tensor("float32", shape, data.subarray(start, start + length));
}

/** [batch, seq, kvHeads, headDim] -> [batch, kvHeads, seq, headDim] */
function headsFirst(t: Tensor<"float32">): Tensor<"float32"> {
  const [b, s, h, d] = t.shape as [number, number, number, number];
  return permuteInto(t, [0, 2, 1, 3], new Tensor("float32", [b, h, s, d]));
}

export class OrtAttention implements LocalAttention {
  readonly name = "ort";
  readonly cache: SessionCache;
  readonly blockRows: number;
  private readonly ownsCache: boolean;

  constructor(options: OrtAttentionOptions = {}) {
    this.ownsCache = options.cache === undefined;
    this.cache = options.cache ?? new SessionCache();
    this.blockRows = options.blockRows ?? 128;
    if (!Number.isInteger(this.blockRows) || this.blockRows < 1) {
      throw new KernelError(`OrtAttention: blockRows must be a positive integer, got ${options.blockRows}`);
    }
  }

  /** Queries per block: blockRows split over the query group (at least 1). */
  blockQueries(dims: AttentionDims): number {
    return Math.max(1, Math.floor(this.blockRows / dims.group));
  }

  private *sites(dims: AttentionDims, plan: BlockPlan): Generator<RunSite> {
    const { batch, heads, kvHeads, group, seqK, headDim: d } = dims;
    for (const block of plan.blocks) {
      const variant: BlockVariant = !block.diagonal ? "full" : block.keyEnd === block.rows ? "diagonalOnly" : "diagonal";
      for (let b = 0; b < batch; b++) {
        for (let g = 0; g < kvHeads; g++) {
          // Blocked rows [block][b][h = g*group .. (g+1)*group][rows]: contiguous.
          const row = block.rowOffset + (b * heads + g * group) * block.rows;
          yield { block, variant, row, rows: group * block.rows, kvBase: (b * kvHeads + g) * seqK * d };
        }
      }
    }
  }

  private shapeOf(dims: AttentionDims, site: RunSite): BlockShape {
    return { variant: site.variant, headDim: dims.headDim, group: dims.group, blockQueries: site.block.rows };
  }

  /** The key inputs of a run: k (whole attended range) or kp/kd views of it. */
  private keyFeeds(keys: Float32Array, site: RunSite, d: number, withWhole: boolean): Record<string, Tensor<"float32">> {
    const { keyEnd, rows } = site.block;
    const feeds: Record<string, Tensor<"float32">> = {};
    if (site.variant === "full" || withWhole) feeds.k = view(keys, site.kvBase, [keyEnd, d]);
    if (site.variant !== "full") feeds.kd = view(keys, site.kvBase + (keyEnd - rows) * d, [rows, d]);
    if (site.variant === "diagonal") feeds.kp = view(keys, site.kvBase, [keyEnd - rows, d]);
    return feeds;
  }

  async forward(q: Tensor<"float32">, k: Tensor<"float32">, v: Tensor<"float32">, options: AttentionOptions): Promise<AttentionForwardResult> {
    const dims = attentionDims(q, k, v, options, "OrtAttention.forward");
    const d = dims.headDim;
    const plan = planBlocks(dims, this.blockQueries(dims));
    // q [b, seqQ, h, d] -> blocked [block][b][h][rows][d], times scale.
    const qBlocked = new Float32Array(plan.totalRows * d);
    gatherQueries(q.data, dims, plan, qBlocked, dims.scale);
    const keys = headsFirst(k).data;
    const values = headsFirst(v).data;
    const oBlocked = new Float32Array(plan.totalRows * d);
    const lseBlocked = new Float32Array(plan.totalRows);
    for (const site of this.sites(dims, plan)) {
      const shape = this.shapeOf(dims, site);
      const feeds = {
        q: view(qBlocked, site.row * d, [site.rows, d]),
        v: view(values, site.kvBase, [site.block.keyEnd, d]),
        ...this.keyFeeds(keys, site, d, false),
      };
      const outputs = { o: view(oBlocked, site.row * d, [site.rows, d]), lse: view(lseBlocked, site.row, [site.rows]) };
      await runInto(this.cache, blockGraphKey("forward", shape), () => buildForwardGraph(shape), feeds, outputs);
    }
    const out = new Tensor("float32", q.shape);
    scatterQueries(oBlocked, dims, plan, out.data);
    const logSumExp = new Tensor("float32", [dims.batch, dims.heads, dims.seqQ]);
    scatterRowValues(lseBlocked, dims, plan, logSumExp.data, -Infinity);
    return { out, logSumExp };
  }

  async backward(
    q: Tensor<"float32">,
    k: Tensor<"float32">,
    v: Tensor<"float32">,
    out: Tensor<"float32">,
    dOut: Tensor<"float32">,
    logSumExp: Tensor<"float32">,
    options: AttentionOptions,
  ): Promise<AttentionGradients> {
    const dims = attentionDims(q, k, v, options, "OrtAttention.backward");
    checkBackwardShapes(dims, out, dOut, logSumExp, q, "OrtAttention.backward");
    const d = dims.headDim;
    const plan = planBlocks(dims, this.blockQueries(dims));
    const qBlocked = new Float32Array(plan.totalRows * d);
    gatherQueries(q.data, dims, plan, qBlocked, dims.scale);
    // dOut -> blocked, with rowDots = sum(dOut * out) per query row.
    const dOutBlocked = new Float32Array(plan.totalRows * d);
    const rowDots = new Float32Array(plan.totalRows);
    gatherQueries(dOut.data, dims, plan, dOutBlocked, 1, { other: out.data, rowDots });
    const lseBlocked = new Float32Array(plan.totalRows);
    gatherRowValues(logSumExp.data, dims, plan, lseBlocked);
    const keys = headsFirst(k).data;
    const values = headsFirst(v).data;
    const dqBlocked = new Float32Array(plan.totalRows * d);
    // dk/dv accumulators [b, kvHeads, seqK, d], two each: run i reads buffer i%2 and writes the other.
    // Blocks run in ascending order, so keys first reached by block i are still zero in both buffers.
    const dkBuffers = [new Float32Array(k.size), new Float32Array(k.size)] as const;
    const dvBuffers = [new Float32Array(k.size), new Float32Array(k.size)] as const;
    let blockIndex = -1;
    let current: QueryBlock | undefined;
    for (const site of this.sites(dims, plan)) {
      if (site.block !== current) {
        current = site.block;
        blockIndex++;
      }
      const from = blockIndex % 2;
      const to = 1 - from;
      const shape = this.shapeOf(dims, site);
      const keyEnd = site.block.keyEnd;
      const feeds = {
        q: view(qBlocked, site.row * d, [site.rows, d]),
        v: view(values, site.kvBase, [keyEnd, d]),
        dout: view(dOutBlocked, site.row * d, [site.rows, d]),
        lse: view(lseBlocked, site.row, [site.rows, 1]),
        rowdot: view(rowDots, site.row, [site.rows, 1]),
        dk_in: view(dkBuffers[from], site.kvBase, [keyEnd, d]),
        dv_in: view(dvBuffers[from], site.kvBase, [keyEnd, d]),
        ...this.keyFeeds(keys, site, d, true),
      };
      const outputs = {
        dq_scaled: view(dqBlocked, site.row * d, [site.rows, d]),
        dk: view(dkBuffers[to], site.kvBase, [keyEnd, d]),
        dv: view(dvBuffers[to], site.kvBase, [keyEnd, d]),
      };
      await runInto(this.cache, blockGraphKey("backward", shape), () => buildBackwardGraph(shape), feeds, outputs);
    }
    const last = (blockIndex + 1) % 2;
    const dq = new Tensor("float32", q.shape);
    scatterQueries(dqBlocked, dims, plan, dq.data, dims.scale);
    const [b, seqK, kvHeads] = k.shape as [number, number, number, number];
    // [b, kvHeads, seqK, d] -> [b, seqK, kvHeads, d]
    const dk = permuteInto(new Tensor("float32", [b, kvHeads, seqK, d], dkBuffers[last]), [0, 2, 1, 3], new Tensor("float32", k.shape));
    const dv = permuteInto(new Tensor("float32", [b, kvHeads, seqK, d], dvBuffers[last]), [0, 2, 1, 3], new Tensor("float32", k.shape));
    return { dq, dk, dv };
  }

  /** Releases the sessions when this instance created the cache (a shared cache is released by its owner). */
  async release(): Promise<void> {
    if (this.ownsCache) await this.cache.release();
  }
}
