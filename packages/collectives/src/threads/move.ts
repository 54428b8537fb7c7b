/**
 * The data plane of the threads backend: what a rank copies into its outbox
 * before the header exchange (`stage`), and how it fills its output from the
 * peers' outboxes once the plan is known (`gather`, `reduceOwnChunk`,
 * `collectChunks`). Outbox contents keep the input's element offsets, and a
 * rank never stages the chunk it keeps for itself (it reads that one straight
 * from its input). Synchronisation is the caller's job.
 */
import { Tensor, evenSplitSizes, type Storage } from "@ulysses/tensors";
import { copyElements, storageView } from "../buffer.js";
import { rowOffset } from "../local/execute.js";
import { outputShapeOf, type OpHeader, type Plan } from "../plan.js";
import { reduceInto, type Source } from "../reduce.js";
import { ensureCapacity } from "./shared-layout.js";

/** Element range [start, end) of the input that this rank keeps (not staged), from its own header. */
function ownRange(header: OpHeader, input: Tensor, rank: number, size: number): [number, number] {
  const rows = input.shape[0] ?? 0;
  const rowElements = rows === 0 ? 0 : input.size / rows;
  const splitsOf = (given: number[] | null | undefined): number[] | null => {
    if (given) return given.length === size && given.every((n) => Number.isInteger(n) && n >= 0) && given.reduce((a, b) => a + b, 0) === rows ? given : null;
    return rows % size === 0 ? new Array<number>(size).fill(rows / size) : null;
  };
  if (header.op === "allToAll" || header.op === "reduceScatter") {
    const splits = splitsOf(header.op === "allToAll" ? header.inputSplits : header.sizes);
    if (!splits) return [0, 0];
    const start = rowOffset(splits, rank) * rowElements;
    return [start, start + splits[rank]! * rowElements];
  }
  if (header.op === "allReduce") {
    const chunks = evenSplitSizes(input.size, size);
    const start = rowOffset(chunks, rank);
    return [start, start + chunks[rank]!];
  }
  return [0, 0];
}

/** Copies what peers will read of `input` into `outbox` (growing it). */
export function stage(header: OpHeader, input: Tensor | null, outbox: SharedArrayBuffer, rank: number, size: number): void {
  if (!input || header.error || header.op === "barrier" || header.op === "newGroup") return;
  if (header.op === "broadcast" && header.root !== rank) return;
  ensureCapacity(outbox, input.byteLength);
  const view = storageView(input.data, outbox, 0, input.size);
  const [start, end] = ownRange(header, input, rank, size);
  copyElements(view, 0, input.data, 0, start);
  copyElements(view, end, input.data, end, input.size - end);
}

const viewOf = (like: Storage, sab: SharedArrayBuffer, elementOffset: number, count: number, bytes: number) =>
  storageView(like, sab, elementOffset * bytes, count);

/**
 * Fills this rank's result of a one-phase plan (allToAll, allGather,
 * reduceScatter, broadcast) from the outboxes (`outboxes[j]` = rank j's
 * outbox of this call's parity). Returns the output tensor.
 */
export function gather(plan: Plan, rank: number, input: Tensor, output: Tensor | null, outboxes: readonly SharedArrayBuffer[]): Tensor {
  const size = plan.size;
  const bytes = plan.elementBytes;
  const out = plan.op === "broadcast" ? input : (output ?? new Tensor(plan.dtype, outputShapeOf(plan, rank)));
  switch (plan.op) {
    case "allToAll": {
      // out [sum_j sendRows[j][rank], ...rowShape] = concat over j of rank j's chunk `rank`
      let at = 0;
      for (let j = 0; j < size; j++) {
        const count = plan.sendRows[j]![rank]! * plan.rowElements;
        const from = rowOffset(plan.sendRows[j]!, rank) * plan.rowElements;
        if (j === rank) copyElements(out.data, at, input.data, from, count);
        else if (count > 0) copyElements(out.data, at, viewOf(out.data, outboxes[j]!, from, count, bytes), 0, count);
        at += count;
      }
      return out;
    }
    case "allGather": {
      // out [sum_j rows[j], ...rowShape] = concat over j of input_j
      for (let j = 0; j < size; j++) {
        const count = plan.rows[j]! * plan.rowElements;
        const at = rowOffset(plan.rows, j) * plan.rowElements;
        if (j === rank) copyElements(out.data, at, input.data, 0, count);
        else if (count > 0) copyElements(out.data, at, viewOf(out.data, outboxes[j]!, 0, count, bytes), 0, count);
      }
      return out;
    }
    case "reduceScatter": {
      // out [rows[rank], ...rowShape] = reduce over j of input_j's chunk `rank`
      const offset = rowOffset(plan.rows, rank) * plan.rowElements;
      const count = plan.rows[rank]! * plan.rowElements;
      if (count === 0) return out;
      const sources: Source[] = outboxes.map((sab, j) =>
        j === rank ? { data: input.data, offset } : { data: viewOf(out.data, sab, offset, count, bytes), offset: 0 },
      );
      reduceInto(plan.dtype, plan.reduceOp, out.data, 0, sources, count);
      return out;
    }
    case "broadcast":
      if (rank !== plan.root && plan.numel > 0) copyElements(out.data, 0, viewOf(out.data, outboxes[plan.root]!, 0, plan.numel, bytes), 0, plan.numel);
      return out;
    default:
      throw new Error(`gather: ${plan.op} is not a one-phase plan`);
  }
}

/** allReduce phase 1: reduces element chunk `rank` over all ranks into this rank's own outbox (same offsets). */
export function reduceOwnChunk(plan: Plan & { op: "allReduce" }, rank: number, tensor: Tensor, outboxes: readonly SharedArrayBuffer[]): void {
  const chunks = evenSplitSizes(plan.numel, plan.size);
  const offset = rowOffset(chunks, rank);
  const count = chunks[rank]!;
  if (count === 0) return;
  const bytes = plan.elementBytes;
  const sources: Source[] = outboxes.map((sab, j) =>
    j === rank ? { data: tensor.data, offset } : { data: viewOf(tensor.data, sab, offset, count, bytes), offset: 0 },
  );
  reduceInto(plan.dtype, plan.reduceOp, viewOf(tensor.data, outboxes[rank]!, offset, count, bytes), 0, sources, count);
}

/** allReduce phase 2: copies every rank's reduced chunk into `tensor`. */
export function collectChunks(plan: Plan & { op: "allReduce" }, tensor: Tensor, outboxes: readonly SharedArrayBuffer[]): void {
  const chunks = evenSplitSizes(plan.numel, plan.size);
  let offset = 0;
  chunks.forEach((count, j) => {
    if (count > 0) copyElements(tensor.data, offset, viewOf(tensor.data, outboxes[j]!, offset, count, plan.elementBytes), 0, count);
    offset += count;
  });
}
