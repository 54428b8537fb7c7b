/**
 * The LM head's contract for a tiled loss (a tile of rows at a time) and the
 * block size of its weight gradient, so a large vocabulary's [hidden, vocab]
 * gradient never exists as one temporary.
 */
import type { BlockOps } from "@ulysses/kernels";
import { narrowInto, Tensor } from "@ulysses/tensors";
import { ModelError } from "./errors.js";
import type { GptConfig } from "./gpt-config.js";
import type { ParameterStore } from "./parameters.js";

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

/** What a Gpt's head is made of: the model's shape, ops and parameters, its weight (fetched per use) and the gradient's block width (undefined: headGradientColumns per call). */
export interface GptHeadParts {
  config: GptConfig;
  ops: BlockOps;
  params: ParameterStore;
  weight: () => Promise<F32>;
  columns: number | undefined;
}

/** The LM head of a Gpt (see GptHead): the head's weight, or tied, the embedding's. */
export function gptHead(parts: GptHeadParts): GptHead {
  const { config, ops, params, weight, columns: fixedColumns } = parts;
  const { hidden, vocab, tiedHead } = config;
  // Tied, the embedding E [vocab, hidden] is the head as it lies, with no transposed copy [hidden, vocab]:
  // logits = h E^T is the product a linear's input gradient computes (one Gemm with transB), dh = dLogits E a plain one.
  const logitsOf = async (h: F32) => {
    const w = await weight();
    return tiedHead ? ops.linearInputGradient(w, h) : ops.linearForward(h, w);
  };
  const inputGradient = async (dLogits: F32) => {
    const w = await weight();
    return tiedHead ? ops.linearForward(dLogits, w) : ops.linearInputGradient(w, dLogits);
  };
  const addGradient = (dw: F32, first: number) => {
    if (tiedHead) params.accumulateTransposed("embed.weight", dw, first);
    else params.accumulateColumns("head.w", dw, first);
  };
  // dLogits' columns of one block, reused by every block of every tile of this head (grown to the largest tile's)
  let block = new Float32Array(0);
  return {
    forward: logitsOf,
    backward: async (h, dLogits) => {
      const rows = dLogits.size / vocab;
      if (ops.linearWeightGradientInto !== undefined) {
        // in place into the flat gradient: no [hidden, vocab] temporary, no blocks
        const d = dLogits.reshape([rows, vocab]);
        if (tiedHead) await ops.linearWeightGradientInto(d, h, params.grad("embed.weight"));
        else await ops.linearWeightGradientInto(h, d, params.grad("head.w"));
        return inputGradient(d);
      }
      const columns = Math.min(vocab, fixedColumns ?? headGradientColumns(hidden, vocab, rows));
      const dx = await inputGradient(dLogits);
      if (columns === vocab) {
        addGradient(await ops.linearWeightGradient(h, dLogits), 0);
        return dx;
      }
      if (block.length < rows * columns) block = new Float32Array(rows * columns);
      const logits = dLogits.reshape([rows, vocab]);
      for (let first = 0; first < vocab; first += columns) {
        const width = Math.min(columns, vocab - first);
        const part = narrowInto(logits, 1, first, width, new Tensor("float32", [rows, width], block.subarray(0, rows * width)));
        addGradient(await ops.linearWeightGradient(h, part), first);
      }
      return dx;
    },
  };
}
