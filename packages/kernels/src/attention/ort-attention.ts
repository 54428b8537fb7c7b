/**
 * OrtAttention: memory-efficient attention (forward and backward) as ONNX
 * graphs run by onnxruntime-node, FlashAttention-style. Forward: per (query
 * block, batch, kv head) one session run computes the block's scores against
 * the keys it attends ([group * rows, keys], never seq x seq), the softmax,
 * out and logSumExp. Backward: per (query block, batch, kv head, key tile)
 * one run recomputes P from logSumExp and accumulates dk/dv (per kv head)
 * and dq (per block) through Gemm's C input. Causal blocks stop at their
 * diagonal, so fully masked keys are skipped rather than masked; only the
 * diagonal square carries a mask. Packed documents narrow every run to the
 * span of keys its block attends (`key-spans.ts`): blocks inside a document
 * run the unmasked or causal graphs on that document's keys, blocks across a
 * boundary add a bias, and key tiles no query attends are skipped, so the
 * cost follows the documents' lengths. (Outputs are fetched, not pre-allocated:
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
import { gatherQueries, gatherRowValues, planBlocks, scatterQueries, scatterRowValues, swapMiddleAxes, type BlockPlan, type QueryBlock } from "./block-plan.js";
import { defaultBackwardRows, defaultForwardRows, defaultTileKeys } from "./block-sizes.js";
import { documentRanges, type KeyRanges } from "./documents.js";
import { documentBias, documentBiasTransposed, planSpans, spanTiles, type BlockSpan } from "./key-spans.js";
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
  /** The keys it visits and its graph variant. */
  span: BlockSpan;
  variant: BlockVariant;
  /** Batch index. */
  b: number;
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

/**
 * The sizes block-sizes.ts reads: with documents, seqK is the longest key
 * range a query attends (the longest document, causal or not), since that is
 * the attention each run really computes; 8 documents of 1024 get the blocks
 * of one 1024 attention, not those of 8192.
 */
function sizingDims(dims: AttentionDims, ranges: KeyRanges | undefined): AttentionDims {
  if (ranges === undefined) return dims;
  let longest = 0;
  for (let i = 0; i < ranges.start.length; i++) longest = Math.max(longest, ranges.end[i]! - ranges.start[i]!);
  return { ...dims, seqK: longest };
}

/** Queries that attend no key (documents without keys before the causal limit): out = 0, logSumExp = -Infinity. */
function clearEmptyQueries(ranges: KeyRanges, dims: AttentionDims, out: Float32Array, logSumExp: Float32Array): void {
  const { batch, seqQ, heads, headDim: d } = dims;
  for (let b = 0; b < batch; b++) {
    for (let i = 0; i < seqQ; i++) {
      if (ranges.start[b * seqQ + i] !== ranges.end[b * seqQ + i]) continue;
      // out [b, i, :, :] and logSumExp [b, :, i]
      out.fill(0, (b * seqQ + i) * heads * d, (b * seqQ + i + 1) * heads * d);
      for (let h = 0; h < heads; h++) logSumExp[(b * heads + h) * seqQ + i] = -Infinity;
    }
  }
}

/** Backward: blocked lse +Infinity for queries that attend no key, so a masked tile's exp(S - lse) is 0 for them, never exp(+inf). */
function hideEmptyQueries(ranges: KeyRanges, dims: AttentionDims, plan: BlockPlan, lseBlocked: Float32Array): void {
  const { batch, seqQ, heads } = dims;
  for (const block of plan.blocks) {
    for (let b = 0; b < batch; b++) {
      for (let i = 0; i < block.rows; i++) {
        const at = b * seqQ + block.start + i;
        if (ranges.start[at] !== ranges.end[at]) continue;
        // [block][b][h][i]
        for (let h = 0; h < heads; h++) lseBlocked[block.rowOffset + (b * heads + h) * block.rows + i] = Infinity;
      }
    }
  }
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

  /** The runs of a plan, (block, batch, kv head) in that order; spans[blockIndex * batch + b] (planSpans), "empty" ones skipped. */
  private *sites(dims: AttentionDims, plan: BlockPlan, spans: BlockSpan[]): Generator<RunSite> {
    const { batch, heads, kvHeads, group, seqK, headDim: d } = dims;
    for (const [index, block] of plan.blocks.entries()) {
      for (let b = 0; b < batch; b++) {
        const span = spans[index * batch + b]!;
        if (span.variant === "empty") continue;
        for (let g = 0; g < kvHeads; g++) {
          // Blocked rows [block][b][h = g*group .. (g+1)*group][rows]: contiguous.
          const row = block.rowOffset + (b * heads + g * group) * block.rows;
          const head = b * kvHeads + g;
          yield { block, span, variant: span.variant, b, row, rows: group * block.rows, head, kvBase: head * seqK * d };
        }
      }
    }
  }

  /** The forward's key inputs: k (the span), or the kp/kd views of it. */
  private keyFeeds(keys: Float32Array, site: RunSite, d: number): Record<string, Tensor<"float32">> {
    const { start, end } = site.span;
    const rows = site.block.rows;
    if (site.variant === "full" || site.variant === "masked") return { k: view(keys, site.kvBase + start * d, [end - start, d]) };
    const feeds = { kd: view(keys, site.kvBase + (end - rows) * d, [rows, d]) };
    return site.variant === "diagonal" ? { ...feeds, kp: view(keys, site.kvBase + start * d, [end - rows - start, d]) } : feeds;
  }

  /** The forward's bias of a "masked" site, built once per (block, batch row) and reused over its kv heads. */
  private biasFeed(ranges: KeyRanges, site: RunSite, last: { site?: RunSite; bias?: Tensor<"float32"> }): Tensor<"float32"> {
    if (last.site?.block !== site.block || last.site.b !== site.b || last.bias === undefined) {
      const { start, end } = site.span;
      last.bias = new Tensor("float32", [site.block.rows, end - start], documentBias(ranges, site.b, site.block, start, end));
    }
    last.site = site;
    return last.bias;
  }

  async forward(q: Tensor<"float32">, k: Tensor<"float32">, v: Tensor<"float32">, options: AttentionOptions): Promise<AttentionForwardResult> {
    const dims = attentionDims(q, k, v, options, "OrtAttention.forward");
    const d = dims.headDim;
    const ranges = dims.documents === undefined ? undefined : documentRanges(dims.documents, dims);
    const plan = planBlocks(dims, this.blockQueries(sizingDims(dims, ranges), "forward"));
    // q [b, seqQ, h, d] -> blocked [block][b][h][rows][d], times scale.
    const qBlocked = new Float32Array(plan.totalRows * d);
    gatherQueries(q.data, dims, plan, qBlocked, dims.scale);
    const keys = headsFirst(k);
    const values = headsFirst(v);
    const oBlocked = new Float32Array(plan.totalRows * d);
    const lseBlocked = new Float32Array(plan.totalRows);
    const lastBias = {};
    for (const site of this.sites(dims, plan, planSpans(dims, plan, ranges))) {
      const shape: BlockShape = { variant: site.variant, headDim: d, group: dims.group, blockQueries: site.block.rows };
      const { start, end } = site.span;
      const feeds: Record<string, Tensor<"float32">> = {
        q: view(qBlocked, site.row * d, [site.rows, d]),
        v: view(values, site.kvBase + start * d, [end - start, d]),
        ...this.keyFeeds(keys, site, d),
      };
      if (site.variant === "masked") feeds.bias = this.biasFeed(ranges!, site, lastBias);
      const result = await this.cache.run(blockGraphKey("forward", shape), () => buildForwardGraph(shape), feeds);
      oBlocked.set(result.o!.data as Float32Array, site.row * d);
      lseBlocked.set(result.lse!.data as Float32Array, site.row);
    }
    const out = new Tensor("float32", q.shape);
    scatterQueries(oBlocked, dims, plan, out.data);
    const logSumExp = new Tensor("float32", [dims.batch, dims.heads, dims.seqQ]);
    scatterRowValues(lseBlocked, dims, plan, logSumExp.data, -Infinity);
    if (ranges) clearEmptyQueries(ranges, dims, out.data, logSumExp.data);
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
    const ranges = dims.documents === undefined ? undefined : documentRanges(dims.documents, dims);
    const plan = planBlocks(dims, this.blockQueries(sizingDims(dims, ranges), "backward"));
    const qBlocked = new Float32Array(plan.totalRows * d);
    gatherQueries(q.data, dims, plan, qBlocked, dims.scale);
    // dOut -> blocked, with rowDots = sum(dOut * out) per query row.
    const dOutBlocked = new Float32Array(plan.totalRows * d);
    const rowDots = new Float32Array(plan.totalRows);
    gatherQueries(dOut.data, dims, plan, dOutBlocked, 1, { other: out.data, rowDots });
    const lseBlocked = new Float32Array(plan.totalRows);
    gatherRowValues(logSumExp.data, dims, plan, lseBlocked);
    if (ranges) hideEmptyQueries(ranges, dims, plan, lseBlocked);
    const spans = planSpans(dims, plan, ranges);
    const keys = headsFirst(k);
    const values = headsFirst(v);
    const dqBlocked = new Float32Array(plan.totalRows * d);
    // dk/dv sums [b, kvHeads, seqK, d]: each tile run adds its share through Gemm's C input.
    const dkSum = new Float32Array(k.size);
    const dvSum = new Float32Array(k.size);
    let biasScratch = new Float32Array(0);
    for (const site of this.sites(dims, plan, spans)) {
      const tileKeys = this.tileKeys ?? defaultTileKeys(site.rows);
      const rowFeeds = {
        q: view(qBlocked, site.row * d, [site.rows, d]),
        dout: view(dOutBlocked, site.row * d, [site.rows, d]),
        lse: view(lseBlocked, site.row, [1, site.rows]),
        rowdot: view(rowDots, site.row, [1, site.rows]),
      };
      // dq [rows, d] accumulates over the tiles: each run's output is the next run's dq_in.
      let dqSum = view(dqBlocked, site.row * d, [site.rows, d]);
      for (const tile of spanTiles(site.span, site.block, tileKeys, ranges, site.b)) {
        const shape: BlockShape = { variant: tile.variant, headDim: d, group: dims.group, blockQueries: site.block.rows };
        const at = site.kvBase + tile.start * d;
        const tileShape = [tile.length, d];
        const feeds: Record<string, Tensor<"float32">> = {
          ...rowFeeds,
          k: view(keys, at, tileShape),
          v: view(values, at, tileShape),
          dk_in: view(dkSum, at, tileShape),
          dv_in: view(dvSum, at, tileShape),
          dq_in: dqSum,
        };
        if (tile.variant === "masked") {
          if (biasScratch.length < tile.length * site.block.rows) biasScratch = new Float32Array(tile.length * site.block.rows);
          const biasT = documentBiasTransposed(ranges!, site.b, site.block, tile.start, tile.length, biasScratch);
          feeds.bias_t = new Tensor("float32", [tile.length, site.block.rows], biasT);
        }
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
