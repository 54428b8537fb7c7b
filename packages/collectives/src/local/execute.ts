/**
 * The reference data movement of every collective: given the validated plan
 * and every rank's tensors (all in this thread), fill every rank's output by
 * plain copies and `reduceInto`. This is the living definition of each op;
 * faster backends are tested against it. Validation is `planOp`'s job.
 */
import { Tensor, allocateStorage } from "@ulysses/tensors";
import { copyElements } from "../buffer.js";
import { outputShapeOf, type Plan } from "../plan.js";
import { reduceInto } from "../reduce.js";

/** Rows before index `j` of `rows` (prefix sum). */
export function rowOffset(rows: readonly number[], j: number): number {
  let sum = 0;
  for (let i = 0; i < j; i++) sum += rows[i]!;
  return sum;
}

/**
 * Runs `plan` for all ranks. inputs[r] is rank r's input (the in-place tensor
 * for allReduce and broadcast), outputs[r] its caller-provided output or null.
 * Returns each rank's result tensor.
 */
export function executePlan(plan: Plan, inputs: readonly (Tensor | null)[], outputs: readonly (Tensor | null)[]): (Tensor | null)[] {
  const size = plan.size;
  const outOf = (r: number) => outputs[r] ?? new Tensor(plan.dtype, outputShapeOf(plan, r));
  switch (plan.op) {
    case "allToAll":
      return inputs.map((_, r) => {
        // out_r [sum_j sendRows[j][r], ...rowShape] = concat over j of rank j's chunk r
        const out = outOf(r);
        let at = 0;
        for (let j = 0; j < size; j++) {
          const rows = plan.sendRows[j]![r]!;
          const from = rowOffset(plan.sendRows[j]!, r);
          copyElements(out.data, at * plan.rowElements, inputs[j]!.data, from * plan.rowElements, rows * plan.rowElements);
          at += rows;
        }
        return out;
      });
    case "allGather":
      return inputs.map((_, r) => {
        // out_r [sum_j rows[j], ...rowShape] = concat over j of input_j
        const out = outOf(r);
        for (let j = 0; j < size; j++) {
          copyElements(out.data, rowOffset(plan.rows, j) * plan.rowElements, inputs[j]!.data, 0, plan.rows[j]! * plan.rowElements);
        }
        return out;
      });
    case "reduceScatter":
      return inputs.map((_, r) => {
        // out_r [rows[r], ...rowShape] = reduce over j of input_j rows [off_r, off_r + rows[r])
        const out = outOf(r);
        const offset = rowOffset(plan.rows, r) * plan.rowElements;
        const sources = inputs.map((t) => ({ data: t!.data, offset }));
        reduceInto(plan.dtype, plan.reduceOp, out.data, 0, sources, plan.rows[r]! * plan.rowElements);
        return out;
      });
    case "allReduce": {
      const result = allocateStorage(plan.dtype, plan.numel);
      reduceInto(
        plan.dtype,
        plan.reduceOp,
        result,
        0,
        inputs.map((t) => ({ data: t!.data, offset: 0 })),
        plan.numel,
      );
      for (const t of inputs) copyElements(t!.data, 0, result, 0, plan.numel);
      return [...inputs];
    }
    case "broadcast": {
      const root = inputs[plan.root]!;
      for (const t of inputs) if (t !== root) copyElements(t!.data, 0, root.data, 0, plan.numel);
      return [...inputs];
    }
    case "barrier":
    case "newGroup":
      return inputs.map(() => null);
  }
}
