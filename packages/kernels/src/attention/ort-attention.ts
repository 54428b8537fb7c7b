/**
 * OrtAttention: memory-efficient attention (forward and backward) as ONNX
 * graphs run by onnxruntime-node, FlashAttention-style but blocked over
 * queries only. Per (query block, batch, kv head) one session run computes
 * the block's scores against the keys it attends ([group * rows, keys], never
 * seq x seq), the softmax, and the outputs; causal blocks stop at their
 * diagonal, so fully masked keys are skipped rather than masked. Backward
 * recomputes P from logSumExp block by block and accumulates dk/dv through
 * Gemm's C input. (Outputs are fetched, not pre-allocated: onnxruntime-node
 * 1.30 copies pre-allocated outputs again after the run, which measured
 * slower than letting it allocate.)
 *
 * Peak extra memory: a few copies of q/k/v-sized tensors plus ONNX Runtime's
 * per-run intermediates, O(rows · seqK) floats. Which graphs run is decided
 * in `block-graphs.ts`, which queries and keys in `block-plan.ts`; threads
 * come from the SessionCache.
 */
import { Tensor } from "@ulysses/tensors";
import { KernelError } from "../errors.js";
import { SessionCache } from "../runtime/session-cache.js";
import { buildBackwardGraph, buildForwardGraph, blockGraphKey, type BlockShape, type BlockVariant } from "./block-graphs.js";
import { gatherQueries, gatherRowValues, planBlocks, scatterQueries, scatterRowValues, swapMiddleAxes, interleaveHeads, type BlockPlan, type QueryBlock } from "./block-plan.js";
import { attentionDims, checkBackwardShapes, type AttentionDims } from "./shapes.js";
import type { AttentionForwardResult, AttentionGradients, AttentionOptions, LocalAttention } from "./types.js";

export interface OrtAttentionOptions {
  /** Sessions and threads (default: a new SessionCache with its default threads). */
  cache?: SessionCache;
  /** Query rows per session run, over the kv head's whole query group (default: defaultBlockRows). */
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
  /** Index of (batch, kv head): b * kvHeads + g. */
  head: number;
  /** Float offset of the kv head in the [batch, kvHeads, seqK, headDim] layout. */
  kvBase: number;
}

/**
 * Rows per run when none are given. Larger runs amortise the per-run cost
 * (session.run, and the dk/dv partial sums that travel each backward run:
 * 6·keys·d floats against 10·rows·keys·d FLOPs); causal blocks also compute
 * a rows x rows diagonal square of which half is masked, so there the rows
 * grow with the sequence (waste about rows / seqK). Chosen by measurement on
 * the 2-core development machine.
 */
export function defaultBlockRows(dims: AttentionDims): number {
  if (!dims.causal) return 512;
  const target = 2 ** Math.round(Math.log2(Math.max(1, dims.seqK) / 16));
  return Math.min(512, Math.max(128, target));
}

function view(data: Float32Array, start: number, shape: number[]): Tensor<"float32"> {
  const length = shape.reduce((a, b) => a * b, 1);
  return new Tensor("float32", shape, data.subarray(start, start + length));
}

/** [batch, seq, kvHeads, headDim] -> [batch, kvHeads, seq, headDim] */
function headsFirst(t: Tensor<"float32">): Float32Array {
  const [b, s, h, d] = t.shape as [number, number, number, number];
  return swapMiddleAxes(t.data, b, s, h, d, new Float32Array(t.size));
}

export class OrtAttention implements LocalAttention {
  readonly name = "ort";
  readonly cache: SessionCache;
  /** Fixed rows per run, or undefined for defaultBlockRows. */
  readonly blockRows: number | undefined;
  private readonly ownsCache: boolean;

  constructor(options: OrtAttentionOptions = {}) {
    this.ownsCache = options.cache === undefined;
    this.cache = options.cache ?? new SessionCache();
    this.blockRows = options.blockRows;
    if (this.blockRows !== undefined && (!Number.isInteger(this.blockRows) || this.blockRows < 1)) {
      throw new KernelError(`OrtAttention: blockRows must be a positive integer, got ${options.blockRows}`);
    }
  }

  /** Queries per block: the rows per run split over the query group (at least 1). */
  blockQueries(dims: AttentionDims): number {
    return Math.max(1, Math.floor((this.blockRows ?? defaultBlockRows(dims)) / dims.group));
  }

  private *sites(dims: AttentionDims, plan: BlockPlan): Generator<RunSite> {
    const { batch, heads, kvHeads, group, seqK, headDim: d } = dims;
    for (const block of plan.blocks) {
      const variant: BlockVariant = !block.diagonal ? "full" : block.keyEnd === block.rows ? "diagonalOnly" : "diagonal";
      for (let b = 0; b < batch; b++) {
        for (let g = 0; g < kvHeads; g++) {
          // Blocked rows [block][b][h = g*group .. (g+1)*group][rows]: contiguous.
          const row = block.rowOffset + (b * heads + g * group) * block.rows;
          const head = b * kvHeads + g;
          yield { block, variant, row, rows: group * block.rows, head, kvBase: head * seqK * d };
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
    const keys = headsFirst(k);
    const values = headsFirst(v);
    const oBlocked = new Float32Array(plan.totalRows * d);
    const lseBlocked = new Float32Array(plan.totalRows);
    for (const site of this.sites(dims, plan)) {
      const shape = this.shapeOf(dims, site);
      const feeds = {
        q: view(qBlocked, site.row * d, [site.rows, d]),
        v: view(values, site.kvBase, [site.block.keyEnd, d]),
        ...this.keyFeeds(keys, site, d, false),
      };
      const result = await this.cache.run(blockGraphKey("forward", shape), () => buildForwardGraph(shape), feeds);
      oBlocked.set(result.o!.data as Float32Array, site.row * d);
      lseBlocked.set(result.lse!.data as Float32Array, site.row);
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
    const keys = headsFirst(k);
    const values = headsFirst(v);
    const dqBlocked = new Float32Array(plan.totalRows * d);
    // dk/dv running sums per (batch, kv head), [seqK, d] each: a run adds its block's share
    // to the prefix [0, keyEnd) through Gemm's C input; a whole-length result simply
    // becomes the new sum, a prefix is copied back.
    const sumLength = dims.seqK * d;
    const dkSums = Array.from({ length: dims.batch * dims.kvHeads }, () => new Float32Array(sumLength));
    const dvSums = Array.from({ length: dims.batch * dims.kvHeads }, () => new Float32Array(sumLength));
    const accumulate = (sums: Float32Array[], head: number, partial: Float32Array) => {
      if (partial.length === sumLength) sums[head] = partial;
      else sums[head]!.set(partial);
    };
    for (const site of this.sites(dims, plan)) {
      const shape = this.shapeOf(dims, site);
      const keyEnd = site.block.keyEnd;
      const feeds = {
        q: view(qBlocked, site.row * d, [site.rows, d]),
        v: view(values, site.kvBase, [keyEnd, d]),
        dout: view(dOutBlocked, site.row * d, [site.rows, d]),
        lse: view(lseBlocked, site.row, [site.rows, 1]),
        rowdot: view(rowDots, site.row, [site.rows, 1]),
        dk_in: view(dkSums[site.head]!, 0, [keyEnd, d]),
        dv_in: view(dvSums[site.head]!, 0, [keyEnd, d]),
        ...this.keyFeeds(keys, site, d, true),
      };
      const result = await this.cache.run(blockGraphKey("backward", shape), () => buildBackwardGraph(shape), feeds);
      dqBlocked.set(result.dq_scaled!.data as Float32Array, site.row * d);
      accumulate(dkSums, site.head, result.dk!.data as Float32Array);
      accumulate(dvSums, site.head, result.dv!.data as Float32Array);
    }
    const dq = new Tensor("float32", q.shape);
    scatterQueries(dqBlocked, dims, plan, dq.data, dims.scale);
    // per (b, kvHead) [seqK, d] -> [b, seqK, kvHeads, d]
    const dk = new Tensor("float32", k.shape, interleaveHeads(dkSums, dims.kvHeads, d, new Float32Array(k.size)));
    const dv = new Tensor("float32", k.shape, interleaveHeads(dvSums, dims.kvHeads, d, new Float32Array(k.size)));
    return { dq, dk, dv };
  }

  /** Releases the sessions when this instance created the cache (a shared cache is released by its owner). */
  async release(): Promise<void> {
    if (this.ownsCache) await this.cache.release();
  }
}
