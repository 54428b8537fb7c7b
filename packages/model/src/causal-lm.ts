/**
 * The contract between a causal language model and what trains or evaluates
 * it: the loss, the optimizer step and checkpoints need exactly this and no
 * model class. The one-device Gpt implements it, and so does what
 * `parallelize` (@ulysses/parallel) returns; a new model family or a new way
 * of running one implements it once and trains unchanged.
 *
 * A forward runs on this rank's part of a batch of whole sequences: all of it
 * on one device, its sequence shard under sequence parallelism. It returns
 * the labels of exactly the rows it ran, flattened, so the loss pairs logits
 * with labels without knowing how the batch was cut. Statistics and weight
 * gradients are summed over `gradientGroup` (null on one device).
 */
import type { ProcessGroup } from "@ulysses/collectives";
import type { Tensor } from "@ulysses/tensors";
import type { GptConfig } from "./gpt-config.js";
import type { ParameterStore } from "./parameters.js";

type F32 = Tensor<"float32">;
type I32 = Tensor<"int32">;

/** Packed documents of a batch. */
export interface LMBatchDocuments {
  /** [batch, seq] int32: the document id of each token, non-decreasing along a row (ids need not start at 0). */
  ids: I32;
  /** [batch, seq] int32: each token's position within its document (RoPE; restarts at each document). */
  positions: I32;
}

/** A batch of whole sequences, labels already shifted (labels[b, i] should follow tokens[b, i]). */
export interface LMBatch {
  /** [batch, seq] token ids */
  tokens: I32;
  /** [batch, seq] next-token labels */
  labels: I32;
  /** Packed documents (absent: one document per row, positions 0 .. seq - 1). */
  documents?: LMBatchDocuments;
}

/** What a forward keeps: the final norm's output and, unless the forward stopped there, the logits. */
export interface CausalLMContext {
  /** The LM head's input [rows, hidden]. */
  hFinal?: F32;
  /** [rows, vocab]; absent after a forward with `logits: false`. */
  logits?: F32;
}

/** The LM head applied a tile of rows at a time. */
export interface CausalLMHead {
  /** h [n, hidden] -> logits [n, vocab] */
  forward(h: F32): Promise<F32>;
  /** Adds the tile's weight gradient into params.grads; returns dh [n, hidden]. */
  backward(h: F32, dLogits: F32): Promise<F32>;
}

/** A forward of this rank's part of a batch. */
export interface CausalLMForward<C extends CausalLMContext> {
  context: C;
  /** The labels of the rows this rank ran, [rows] (rows = batch x this rank's tokens per sequence). */
  labels: I32;
}

export interface CausalLM<C extends CausalLMContext = CausalLMContext> {
  readonly config: GptConfig;
  /** The weights and their flat gradient (this rank's unreduced gradient until the step sums it). */
  readonly params: ParameterStore;
  /** The ranks that hold a replica of the weights: loss statistics and gradients are summed over it (null on one device). */
  readonly gradientGroup: ProcessGroup | null;
  /** This rank's part of `batch` through the model; `logits: false` stops at the final norm (context.hFinal). */
  forwardBatch(batch: LMBatch, options: { logits: boolean }): Promise<CausalLMForward<C>>;
  /** The LM head, for a tiled loss. */
  lmHead(): CausalLMHead;
  /** Backpropagates dLogits [rows, vocab]; adds this rank's weight gradients into params.grads. Spends the context. */
  backward(context: C, dLogits: F32): Promise<void>;
  /** Backpropagates dhFinal [rows, hidden] (the head's gradient was added by `lmHead().backward`). Spends the context. */
  backwardFromHidden(context: C, dhFinal: F32): Promise<void>;
  /** Gives the context's buffers back when backward will not run (evaluation). */
  release(context: C): void;
}
