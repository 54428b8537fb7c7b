/**
 * The local attention contract that UlyssesAttention (and any other
 * sequence-parallel wrapper) wraps. Implementations compute attention on the
 * tokens and heads they are given and never communicate.
 *
 * Layout: q is [batch, seqQ, heads, headDim]; k and v are
 * [batch, seqK, kvHeads, headDim] with heads % kvHeads === 0 (grouped-query
 * attention: q head h uses kv head floor(h / (heads / kvHeads))). Float32.
 *
 * Causal masking aligns the last query with the last key (bottom-right, as in
 * FlashAttention 2): query i attends key j when j <= i + (seqK - seqQ).
 * Document masking (`documents`) further restricts query i to the keys of
 * its own document (packed variable-length sequences).
 *
 * logSumExp is [batch, heads, seqQ]: log(sum_j exp(scale * q_i . k_j)) over the
 * keys query i attends. Backward recomputes the probabilities from it.
 *
 * Shapes are checked by `attentionDims` and `checkBackwardShapes`
 * (`shapes.ts`), which every implementation calls. Implementations are made
 * by name through the registry (`registry.ts`).
 */
import type { Tensor } from "@ulysses/tensors";

/**
 * Packed documents: the document (segment) of every query and key position,
 * per batch row, as int32 ids that never decrease along a row. A query
 * attends only the keys of its own document (and, when causal, not after
 * it). Every query must see at least one key: its own position is among the
 * keys when the keys hold the whole sequence (one device, Ulysses) or the
 * sequence up to the query (all-gather-KV). (One that sees none gets out = 0,
 * logSumExp = -Infinity and zero gradients, as any query without keys.)
 * `attentionDims` checks the ids; `documentRanges` (`documents.ts`) gives
 * every query's keys as one contiguous range.
 */
export interface AttentionDocuments {
  /** [batch * seqQ] */
  query: Int32Array;
  /** [batch * seqK] */
  key: Int32Array;
}

export interface AttentionOptions {
  causal: boolean;
  /** Score scale; default 1 / sqrt(headDim). */
  scale?: number;
  /** Document masking of packed sequences; absent: one document per row. */
  documents?: AttentionDocuments;
  /**
   * The caller has nothing to progress while this call runs (no exchange posted before it that should move meanwhile), so an
   * implementation may compute on the calling thread and block it, saving the hand-off to a pool thread and back. The results
   * are the same either way. Default false: an implementation that can leave the calling thread free does (FusedAttention
   * computes on libuv's pool). One-device attention and Ulysses (unpipelined) set it; ring and pipelined Ulysses, whose
   * transfers overlap the kernel, do not. Implementations that always run one way ignore it.
   */
  onCallerThread?: boolean;
}

export interface AttentionForwardResult {
  /** [batch, seqQ, heads, headDim] */
  out: Tensor<"float32">;
  /** [batch, heads, seqQ] */
  logSumExp: Tensor<"float32">;
}

export interface AttentionGradients {
  /** [batch, seqQ, heads, headDim] */
  dq: Tensor<"float32">;
  /** [batch, seqK, kvHeads, headDim], summed over each kv head's query group */
  dk: Tensor<"float32">;
  /** [batch, seqK, kvHeads, headDim] */
  dv: Tensor<"float32">;
}

export interface LocalAttention {
  readonly name: string;
  forward(q: Tensor<"float32">, k: Tensor<"float32">, v: Tensor<"float32">, options: AttentionOptions): Promise<AttentionForwardResult>;
  backward(
    q: Tensor<"float32">,
    k: Tensor<"float32">,
    v: Tensor<"float32">,
    out: Tensor<"float32">,
    dOut: Tensor<"float32">,
    logSumExp: Tensor<"float32">,
    options: AttentionOptions,
  ): Promise<AttentionGradients>;
  /**
   * Frees what this instance owns: ONNX Runtime sessions, native runtimes,
   * buffers. Idempotent: calling it again is harmless. A SessionCache the
   * caller passed in is not the instance's to free; its owner releases it.
   * After release an implementation either rebuilds what it needs on the next
   * call (OrtAttention) or rejects the call with an error (FusedAttention).
   * The result may be a promise: await it before releasing what the instance
   * was given (`await attention.release(); await cache.release();`).
   */
  release(): void | Promise<void>;
}
