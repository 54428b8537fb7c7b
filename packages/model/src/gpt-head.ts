/**
 * The LM head's contract for a tiled loss (a tile of rows at a time) and the
 * block size of its weight gradient, so a large vocabulary's [hidden, vocab]
 * gradient never exists as one temporary.
 */
import type { Tensor } from "@ulysses/tensors";
import { ModelError } from "./errors.js";

type F32 = Tensor<"float32">;

/**
 * The LM head, for applying it a tile of rows at a time (the tiled loss of
 * @ulysses/training). Its weight is fetched once and shared by every tile:
 * the head's [hidden, vocab], or when tied the embedding [vocab, hidden] as it
 * lies (the products take it transposed; no transposed copy is made).
 */
export interface GptHead {
  /** h [n, hidden] -> logits [n, vocab] */
  forward(h: F32): Promise<F32>;
  /**
   * Adds this tile's weight gradient h^T dLogits into params.grads (the
   * embedding's, transposed, when tied); returns dh = dLogits W^T [n, hidden].
   * The weight gradient is made in blocks of vocabulary columns (see
   * HEAD_GRADIENT_BLOCK_BYTES), each added and dropped before the next.
   */
  backward(h: F32, dLogits: F32): Promise<F32>;
}

/**
 * The widest buffer the LM head's backward makes for its weight gradient: a
 * block of columns of h^T dLogits [hidden, columns] and the dLogits columns it
 * reads [n, columns] are each at most this size, so a large vocabulary's
 * [hidden, vocab] gradient (32 MiB at hidden 256, vocab 32768) never exists
 * as one tensor beside the gradient it is added into.
 */
export const HEAD_GRADIENT_BLOCK_BYTES = 4 * 1024 * 1024;

/** Vocabulary columns per block of the head's weight gradient for n rows (all of them when the whole gradient fits the block). */
export function headGradientColumns(hidden: number, vocab: number, rows: number): number {
  return Math.max(1, Math.min(vocab, Math.floor(HEAD_GRADIENT_BLOCK_BYTES / (4 * Math.max(hidden, rows)))));
}

export function validHeadColumns(where: string, name: string, columns: number | undefined): number | undefined {
  if (columns !== undefined && (!Number.isSafeInteger(columns) || columns < 1))
    throw new ModelError(`${where}: ${name} must be a positive integer, got ${columns}`);
  return columns;
}

export interface GptHeadOptions {
  /** Vocabulary columns per block of the weight gradient (default: headGradientColumns). */
  gradientColumns?: number;
}
