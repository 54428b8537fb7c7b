/**
 * The FLOP counts of the GPT, one definition for the trainer's MFU, the
 * cluster projection and the benchmarks:
 *
 * - matrix part: 2 FLOPs per weight of every matrix a token passes through
 *   (q, k, v, o, the MLP's matrices and the LM head; the embedding lookup is
 *   no product), per token of the forward pass;
 * - attention: QKᵀ and the weighted sum of V, 2 · d FLOPs each per attended
 *   (query, key) pair and head: 4 · width FLOPs per pair in the forward pass
 *   (width = heads · head dim), 8 · width in the backward (the recomputed
 *   scores not counted). A causal kernel attends N(N+1)/2 pairs of the N²
 *   (each query its own position and those before it);
 * - training: forward + backward = 3 × forward (Narayanan et al. 2021,
 *   "Efficient large-scale language model training on GPU clusters", eq. 3,
 *   without recomputation).
 */
import { MeasureError } from "./errors.js";

/** The forward and backward passes of one training step, counted in forward passes: the backward costs 2 forwards. */
export const TRAINING_PASSES = 3;

/** The sizes the FLOP counts read. A standard GPT: kvWidth = hidden, mlpHidden = 4 · hidden, one MLP input matrix. */
export interface GptDimensions {
  layers: number;
  hidden: number;
  /** Vocabulary of the LM head (0: no head, e.g. one block alone). */
  vocab: number;
  /** Width of the MLP's hidden layer. */
  mlpHidden: number;
  /** Width of the key and value projections, kvHeads · head dim (default hidden: no grouped-query attention). */
  kvWidth?: number;
  /** Width of the query projection and of the attention, heads · head dim (default hidden: head dim = hidden / heads). */
  qWidth?: number;
  /** SwiGLU: gate and up both map hidden to mlpHidden (3 MLP matrices instead of 2). Default false. */
  gatedMlp?: boolean;
}

function positiveInteger(name: string, value: number, minimum = 1): void {
  if (!Number.isInteger(value) || value < minimum) throw new MeasureError(`${name} must be an integer >= ${minimum}, got ${value}`);
}

function checkDimensions(d: GptDimensions): void {
  positiveInteger("GPT layers", d.layers);
  positiveInteger("GPT hidden", d.hidden);
  positiveInteger("GPT vocab", d.vocab, 0);
  positiveInteger("GPT mlpHidden", d.mlpHidden);
  if (d.kvWidth !== undefined) positiveInteger("GPT kvWidth", d.kvWidth);
  if (d.qWidth !== undefined) positiveInteger("GPT qWidth", d.qWidth);
}

/** Weights in the GPT's matrices: per layer q and o (h·qWidth), k and v (h·kvWidth), the MLP's; plus the LM head (h·V). */
export function gptMatrixWeights(d: GptDimensions): number {
  checkDimensions(d);
  const h = d.hidden;
  const attention = 2 * h * (d.qWidth ?? h) + 2 * h * (d.kvWidth ?? h);
  const mlp = (d.gatedMlp === true ? 3 : 2) * h * d.mlpHidden;
  return d.layers * (attention + mlp) + h * d.vocab;
}

/** Forward matrix FLOPs per token: 2 per matrix weight. */
export function matmulFlopsPerToken(d: GptDimensions): number {
  return 2 * gptMatrixWeights(d);
}

/** (query, key) pairs one head attends over a sequence of `seq`: seq² without a mask, seq(seq+1)/2 causal. */
export function attendedPairs(seq: number, causal: boolean): number {
  positiveInteger("sequence length", seq);
  return causal ? (seq * (seq + 1)) / 2 : seq * seq;
}

/** Forward FLOPs per attended (query, key) pair and unit of attention width: QKᵀ and the weighted sum of V, 2 each. */
const FORWARD_FLOPS_PER_PAIR = 4;

export interface AttentionShape {
  seq: number;
  /** heads · head dim. */
  width: number;
  causal: boolean;
}

/** FLOPs of one attention over one sequence: 4 · width per pair forward, 8 backward, 12 both. */
export function attentionFlops(shape: AttentionShape, pass: "forward" | "backward" | "training" = "forward"): number {
  positiveInteger("attention width", shape.width);
  const perPair = FORWARD_FLOPS_PER_PAIR * (pass === "forward" ? 1 : pass === "backward" ? 2 : 3);
  return perPair * shape.width * attendedPairs(shape.seq, shape.causal);
}

export interface SequenceFlops {
  /** The matrix part: seq tokens through every matrix. */
  matmul: number;
  /** The attention part, every layer. */
  attention: number;
}

/** Forward FLOPs of `tokens` tokens whose attention covers `pairs` (query, key) pairs per head: the one count the others derive from. */
function forwardFlopsOverPairs(d: GptDimensions, tokens: number, pairs: number): SequenceFlops {
  const width = d.qWidth ?? d.hidden;
  positiveInteger("attention width", width);
  return { matmul: tokens * matmulFlopsPerToken(d), attention: d.layers * (FORWARD_FLOPS_PER_PAIR * width * pairs) };
}

/** Forward FLOPs of one sequence of `seq` tokens (attention over the whole sequence, causal or not). */
export function gptForwardFlops(d: GptDimensions, seq: number, causal: boolean): SequenceFlops {
  return forwardFlopsOverPairs(d, seq, attendedPairs(seq, causal));
}

/**
 * Causal (query, key) pairs one head attends over packed documents under
 * document masking: each run of equal ids along a row of `ids` (row-major,
 * rows of `seq` tokens, ids non-decreasing along a row) attends its own
 * n(n+1)/2, none across documents.
 */
export function documentPairs(ids: ArrayLike<number>, seq: number): number {
  positiveInteger("sequence length", seq);
  if (ids.length % seq !== 0) throw new MeasureError(`document ids: ${ids.length} ids do not make whole rows of ${seq}`);
  let pairs = 0;
  for (let row = 0; row < ids.length; row += seq) {
    let run = 0;
    for (let i = row; i < row + seq; i++) {
      run = i > row && ids[i] === ids[i - 1] ? run + 1 : 1;
      pairs += run;
    }
  }
  return pairs;
}

/**
 * FLOPs of one training step over `tokens` tokens whose attention covers
 * `pairs` (query, key) pairs per head in all (attendedPairs per sequence, or
 * documentPairs of packed documents).
 */
export function gptTrainingFlopsOverPairs(d: GptDimensions, tokens: number, pairs: number): number {
  for (const [name, value] of [
    ["tokens", tokens],
    ["attended pairs", pairs],
  ] as const)
    if (!Number.isSafeInteger(value) || value < 0) throw new MeasureError(`${name} must be an integer >= 0, got ${value}`);
  const forward = forwardFlopsOverPairs(d, tokens, pairs);
  return TRAINING_PASSES * (forward.matmul + forward.attention);
}

/** FLOPs of one training step (forward and backward) over `sequences` sequences of `seq` tokens. */
export function gptTrainingFlops(d: GptDimensions, seq: number, causal: boolean, sequences = 1): number {
  if (!(sequences >= 0) || !Number.isFinite(sequences)) throw new MeasureError(`sequences must be a finite number >= 0, got ${sequences}`);
  const forward = gptForwardFlops(d, seq, causal);
  return sequences * TRAINING_PASSES * (forward.matmul + forward.attention);
}
