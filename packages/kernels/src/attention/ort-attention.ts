/**
 * OrtAttention: memory-efficient attention (forward and backward) as ONNX
 * graphs run by onnxruntime-node, FlashAttention-style. Forward: per (query
 * block, batch, kv head) one session run computes the block's scores against
 * the keys it attends ([group * rows, keys], never seq x seq), the softmax,
 * out and logSumExp. Backward: per (query block, batch, kv head, key tile)
 * one run recomputes P from logSumExp and accumulates dk/dv (per kv head)
 * and dq (per block) through Gemm's C input. Causal blocks stop at their
 * diagonal, so fully masked keys are skipped rather than masked; only the
 * diagonal square carries a mask. (Outputs are fetched, not pre-allocated:
 * onnxruntime-node 1.30 copies pre-allocated outputs again after the run,
 * which measured slower than letting it allocate.)
 *
 * Peak extra memory: a few copies of q/k/v-sized tensors plus ONNX Runtime's
 * per-run intermediates, O(rows · seqK) floats. Which graphs run is decided
 * in `block-graphs.ts`, which queries and keys in `block-plan.ts`, how big
 * in `block-sizes.ts`; threads come from the SessionCache.
 */
import { Tensor } from "@ulysses/tensors";
import { KernelError } from "../errors.js";
import { SessionCache } from "../runtime/session-cache.js";
import { buildBackwardGraph, buildForwardGraph, blockGraphKey, type BlockShape, type BlockVariant } from "./block-graphs.js";
import {
  gatherQueries,
  gatherRowValues,
  planBlocks,
  scatterQueries,
  scatterRowValues,
  swapMiddleAxes,
  keyTiles,
  type BlockPlan,
  type QueryBlock,
} from "./block-plan.js";
import { defaultBackwardRows, defaultForwardRows, defaultTileKeys } from "./block-sizes.js";
import { attentionDims, checkBackwardShapes, type AttentionDims } from "./shapes.js";
import type { AttentionForwardResult, AttentionGradients, AttentionOptions, LocalAttention } from "./types.js";

export interface OrtAttentionOptions {
  /** Sessions and threads (default: a new SessionCache, owned and released by this instance). */
  cache?: SessionCache;
  /** Intra-op threads of the SessionCache this instance creates when no cache is given (default: the cache's default). */
  threads?: number;
  /** Query rows per session run, over the kv head's whole query group (default: block-sizes.ts). */
  blockRows?: number;
  /** Keys per backward tile (default: block-sizes.ts). */
  tileKeys?: number;
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
  /** Fixed rows per run, or undefined for the defaults of block-sizes.ts. */
  readonly blockRows: number | undefined;
  /** Fixed keys per backward tile, or undefined for the default. */
  readonly tileKeys: number | undefined;
  private readonly ownsCache: boolean;

  constructor(options: OrtAttentionOptions = {}) {
    if (options.cache !== undefined && options.threads !== undefined && options.threads !== options.cache.intraOpThreads) {
      throw new KernelError(
        `OrtAttention: threads (${options.threads}) differs from the cache's intraOpThreads (${options.cache.intraOpThreads}); pass one of them`,
      );
    }
    this.ownsCache = options.cache === undefined;
    this.cache = options.cache ?? new SessionCache({ intraOpThreads: options.threads });
    this.blockRows = options.blockRows;
    this.tileKeys = options.tileKeys;
    for (const [name, value] of [
      ["blockRows", this.blockRows],
      ["tileKeys", this.tileKeys],
    ] as const) {
      if (value !== undefined && (!Number.isInteger(value) || value < 1)) {
        throw new KernelError(`OrtAttention: ${name} must be a positive integer, got ${value}`);
      }
    }
  }

  /** Queries per block: the rows per run split over the query group (at least 1). */
  blockQueries(dims: AttentionDims, direction: "forward" | "backward"): number {
    const rows = this.blockRows ?? (direction === "forward" ? defaultForwardRows(dims) : defaultBackwardRows(dims));
    return Math.max(1, Math.floor(rows / dims.group));
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

  /** The forward's key inputs: k (the attended range), or the kp/kd views of it. */
  private keyFeeds(keys: Float32Array, site: RunSite, d: number): Record<string, Tensor<"float32">> {
    const { keyEnd, rows } = site.block;
    if (site.variant === "full") return { k: view(keys, site.kvBase, [keyEnd, d]) };
    const feeds = { kd: view(keys, site.kvBase + (keyEnd - rows) * d, [rows, d]) };
    return site.variant === "diagonal" ? { ...feeds, kp: view(keys, site.kvBase, [keyEnd - rows, d]) } : feeds;
  }

  async forward(q: Tensor<"float32">, k: Tensor<"float32">, v: Tensor<"float32">, options: AttentionOptions): Promise<AttentionForwardResult> {
    const dims = attentionDims(q, k, v, options, "OrtAttention.forward");
    const d = dims.headDim;
    const plan = planBlocks(dims, this.blockQueries(dims, "forward"));
    // q [b, seqQ, h, d] -> blocked [block][b][h][rows][d], times scale.
    const qBlocked = new Float32Array(plan.totalRows * d);
    gatherQueries(q.data, dims, plan, qBlocked, dims.scale);
    const keys = headsFirst(k);
    const values = headsFirst(v);
    const oBlocked = new Float32Array(plan.totalRows * d);
    const lseBlocked = new Float32Array(plan.totalRows);
    for (const site of this.sites(dims, plan)) {
      const shape: BlockShape = { variant: site.variant, headDim: d, group: dims.group, blockQueries: site.block.rows };
      const feeds = {
        q: view(qBlocked, site.row * d, [site.rows, d]),
        v: view(values, site.kvBase, [site.block.keyEnd, d]),
        ...this.keyFeeds(keys, site, d),
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
    const plan = planBlocks(dims, this.blockQueries(dims, "backward"));
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
    // dk/dv sums [b, kvHeads, seqK, d]: each tile run adds its share through Gemm's C input.
    const dkSum = new Float32Array(k.size);
    const dvSum = new Float32Array(k.size);
    for (const site of this.sites(dims, plan)) {
      const tileKeys = this.tileKeys ?? defaultTileKeys(site.rows);
      const rowFeeds = {
        q: view(qBlocked, site.row * d, [site.rows, d]),
        dout: view(dOutBlocked, site.row * d, [site.rows, d]),
        lse: view(lseBlocked, site.row, [1, site.rows]),
        rowdot: view(rowDots, site.row, [1, site.rows]),
      };
      // dq [rows, d] accumulates over the tiles: each run's output is the next run's dq_in.
      let dqSum = view(dqBlocked, site.row * d, [site.rows, d]);
      for (const tile of keyTiles(site.block, tileKeys)) {
        const shape: BlockShape = { variant: tile.diagonal ? "diagonalOnly" : "full", headDim: d, group: dims.group, blockQueries: site.block.rows };
        const at = site.kvBase + tile.start * d;
        const tileShape = [tile.length, d];
        const feeds = {
          ...rowFeeds,
          k: view(keys, at, tileShape),
          v: view(values, at, tileShape),
          dk_in: view(dkSum, at, tileShape),
          dv_in: view(dvSum, at, tileShape),
          dq_in: dqSum,
        };
        const result = await this.cache.run(blockGraphKey("backward", shape), () => buildBackwardGraph(shape), feeds);
        dkSum.set(result.dk!.data as Float32Array, at);
        dvSum.set(result.dv!.data as Float32Array, at);
        dqSum = result.dq_scaled as Tensor<"float32">;
      }
      dqBlocked.set(dqSum.data, site.row * d);
    }
    const dq = new Tensor("float32", q.shape);
    scatterQueries(dqBlocked, dims, plan, dq.data, dims.scale);
    // [b, kvHeads, seqK, d] -> [b, seqK, kvHeads, d]
    const { batch, kvHeads, seqK } = dims;
    const dk = new Tensor("float32", k.shape, swapMiddleAxes(dkSum, batch, kvHeads, seqK, d, new Float32Array(k.size)));
    const dv = new Tensor("float32", k.shape, swapMiddleAxes(dvSum, batch, kvHeads, seqK, d, new Float32Array(k.size)));
    return { dq, dk, dv };
  }

  /**
   * LocalAttention.release: frees the sessions when this instance created the
   * cache; a cache passed in is left alone (its owner releases it). Idempotent;
   * a later call builds its sessions again.
   */
  async release(): Promise<void> {
    if (this.ownsCache) await this.cache.release();
  }
}
