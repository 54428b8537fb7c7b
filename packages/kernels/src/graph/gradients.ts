/**
 * Reverse-mode differentiation of a recorded tape: `gradients` walks the
 * tape's nodes in reverse, applies each op's registered rule and accumulates
 * the input gradients. Importing this module registers the built-in rules
 * (`gradients-rules.ts`). Running graphs is left to the session cache.
 */
import { KernelError } from "../errors.js";
import "./gradients-rules.js";
import { getGradient, registeredGradients } from "./gradients-registry.js";
import type { Tape, TapeValue } from "./gradients-tape.js";

export { registerGradient, getGradient, registeredGradients, unbroadcast, type GradientRule } from "./gradients-registry.js";

/**
 * Records on `tape` the gradients of sum_i <ys[i], dys[i]> with respect to
 * each of `xs`. Only nodes recorded so far are differentiated, and only those
 * on a path from some x. An x that no y depends on gets a zero gradient.
 */
export function gradients(tape: Tape, ys: readonly TapeValue[], dys: readonly TapeValue[], xs: readonly TapeValue[]): TapeValue[] {
  if (ys.length !== dys.length) throw new KernelError(`gradients: ${ys.length} outputs but ${dys.length} output gradients`);
  ys.forEach((y, i) => {
    if (y.dims.join() !== dys[i]!.dims.join()) {
      throw new KernelError(`gradients: output ${i} is [${y.dims.join(", ")}] but its gradient is [${dys[i]!.dims.join(", ")}]`);
    }
  });
  const nodes = [...tape.nodes];
  const dependsOnX = new Set(xs.map((x) => x.id));
  for (const node of nodes) {
    if (node.inputs.some((i) => i !== null && dependsOnX.has(i.id))) for (const o of node.outputs) dependsOnX.add(o.id);
  }
  const grads = new Map<number, TapeValue>();
  const accumulate = (value: TapeValue, grad: TapeValue): void => {
    const previous = grads.get(value.id);
    grads.set(value.id, previous ? tape.op("Add", [previous, grad]) : grad);
  };
  ys.forEach((y, i) => accumulate(y, dys[i]!));
  for (let n = nodes.length - 1; n >= 0; n--) {
    const node = nodes[n]!;
    if (!node.outputs.some((o) => dependsOnX.has(o.id))) continue;
    const outputGrads = node.outputs.map((o) => grads.get(o.id) ?? null);
    if (outputGrads.every((g) => g === null)) continue;
    const rule = getGradient(node.opType);
    if (!rule) throw new KernelError(`no gradient rule for op '${node.opType}'; registered: ${registeredGradients().join(", ")}`);
    const wants = node.inputs.map((i) => i !== null && dependsOnX.has(i.id));
    const inputGrads = rule(tape, node, outputGrads, wants);
    node.inputs.forEach((input, i) => {
      const g = inputGrads[i];
      if (input === null || !wants[i] || !g) return;
      if (g.dims.join() !== input.dims.join()) {
        throw new KernelError(`gradient rule of '${node.opType}' returned [${g.dims.join(", ")}] for input ${i} of shape [${input.dims.join(", ")}]`);
      }
      accumulate(input, g);
    });
  }
  return xs.map((x) => grads.get(x.id) ?? tape.op("Expand", [tape.scalar(0, x), tape.int64s(x.dims)]));
}
