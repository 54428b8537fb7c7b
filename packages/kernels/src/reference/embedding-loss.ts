/**
 * Reference token embedding (gather / scatter-add) and cross-entropy with
 * ignored labels, in float64.
 */
import type { Tensor } from "@ulysses/tensors";
import { KernelError } from "../errors.js";
import { checkIds, checkLabels, expectSize } from "../ops/validate.js";
import { zeros64, type F64, type Real } from "./float64.js";

export const DEFAULT_IGNORE_INDEX = -100;

export function embeddingForward64(ids: Tensor<"int32">, table: Real): F64 {
  if (table.rank !== 2) throw new KernelError(`embeddingForward: table must be [vocab, hidden], got ${table}`);
  const [vocab, h] = table.shape as [number, number];
  checkIds("embeddingForward", ids, vocab);
  // out: [...ids.shape, hidden]
  const out = zeros64([...ids.shape, h]);
  for (let r = 0; r < ids.size; r++) {
    const id = ids.data[r]!;
    for (let i = 0; i < h; i++) out.data[r * h + i] = table.data[id * h + i]!;
  }
  return out;
}

export function embeddingBackward64(ids: Tensor<"int32">, dy: Real, vocab: number): F64 {
  checkIds("embeddingBackward", ids, vocab);
  const h = dy.shape[dy.rank - 1]!;
  expectSize("embeddingBackward", "dy (ids.size * hidden)", dy, ids.size * h);
  const grad = zeros64([vocab, h]);
  for (let r = 0; r < ids.size; r++) {
    const id = ids.data[r]!;
    for (let i = 0; i < h; i++) grad.data[id * h + i] += dy.data[r * h + i]!;
  }
  return grad;
}

function logitsShape(op: string, logits: Real): [number, number] {
  if (logits.rank !== 2) throw new KernelError(`${op}: logits must be [rows, vocab], got ${logits}`);
  return logits.shape as [number, number];
}

function logSumExp(logits: Real, r: number, vocab: number): number {
  let max = -Infinity;
  for (let v = 0; v < vocab; v++) max = Math.max(max, logits.data[r * vocab + v]!);
  let sum = 0;
  for (let v = 0; v < vocab; v++) sum += Math.exp(logits.data[r * vocab + v]! - max);
  return max + Math.log(sum);
}

export function crossEntropyForward64(
  logits: Real,
  labels: Tensor<"int32">,
  ignoreIndex = DEFAULT_IGNORE_INDEX,
): { lossSum: number; count: number; rowLosses: Float64Array } {
  const [rows, vocab] = logitsShape("crossEntropyForward", logits);
  const count = checkLabels("crossEntropyForward", labels, rows, vocab, ignoreIndex);
  let lossSum = 0;
  const rowLosses = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    const label = labels.data[r]!;
    if (label === ignoreIndex) continue;
    rowLosses[r] = logSumExp(logits, r, vocab) - logits.data[r * vocab + label]!;
    lossSum += rowLosses[r]!;
  }
  return { lossSum, count, rowLosses };
}

export function crossEntropyBackward64(logits: Real, labels: Tensor<"int32">, gradScale: number, ignoreIndex = DEFAULT_IGNORE_INDEX): F64 {
  const [rows, vocab] = logitsShape("crossEntropyBackward", logits);
  checkLabels("crossEntropyBackward", labels, rows, vocab, ignoreIndex);
  const grad = zeros64(logits.shape);
  for (let r = 0; r < rows; r++) {
    const label = labels.data[r]!;
    if (label === ignoreIndex) continue;
    const lse = logSumExp(logits, r, vocab);
    for (let v = 0; v < vocab; v++) grad.data[r * vocab + v] = gradScale * Math.exp(logits.data[r * vocab + v]! - lse);
    grad.data[r * vocab + label] -= gradScale;
  }
  return grad;
}
