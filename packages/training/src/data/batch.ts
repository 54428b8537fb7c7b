/**
 * Training batches: next-token labels shifted from windows of seq + 1
 * tokens, IGNORE_INDEX where nothing is predicted. The batch type itself and
 * its sequence-parallel shard are @ulysses/parallel's (`Batch`, `shardBatch`).
 */
import type { Batch } from "@ulysses/parallel";
import { Tensor, narrow } from "@ulysses/tensors";
import { TrainingError } from "../errors.js";

/** Labels equal to this do not count towards the loss or the accuracy. */
export const IGNORE_INDEX = -100;

/** Shift a [batch, seq + 1] window into tokens [batch, seq] and labels [batch, seq]. */
export function shiftWindows(windows: Int32Array, batch: number, seq: number): Batch {
  if (windows.length !== batch * (seq + 1)) throw new TrainingError(`shiftWindows: ${windows.length} values for batch ${batch} x (seq ${seq} + 1)`);
  const tokens = new Tensor("int32", [batch, seq]);
  const labels = new Tensor("int32", [batch, seq]);
  for (let b = 0; b < batch; b++) {
    tokens.data.set(windows.subarray(b * (seq + 1), b * (seq + 1) + seq), b * seq);
    labels.data.set(windows.subarray(b * (seq + 1) + 1, (b + 1) * (seq + 1)), b * seq);
  }
  return { tokens, labels };
}

/** Rows [start, start + count) of a batch, its documents too (a data-parallel group's share of the global batch). */
export function batchRows(batch: Batch, start: number, count: number): Batch {
  // [rows, seq] -> [count, seq]
  const rows: Batch = { tokens: narrow(batch.tokens, 0, start, count), labels: narrow(batch.labels, 0, start, count) };
  if (batch.documents !== undefined) {
    rows.documents = { ids: narrow(batch.documents.ids, 0, start, count), positions: narrow(batch.documents.positions, 0, start, count) };
  }
  return rows;
}
