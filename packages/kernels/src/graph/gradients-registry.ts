/**
 * The gradient registry: one vector-Jacobian rule per ONNX op type (like
 * tfjs-core's gradient registry), written in terms of ops recorded on a tape,
 * plus `unbroadcast`, which rules share. Rules are registered by
 * `gradients-rules.ts`; the reverse walk that applies them is `gradients.ts`.
 */
import { KernelError } from "../errors.js";
import { attr } from "./builder.js";
import type { Tape, TapeNode, TapeValue } from "./gradients-tape.js";

/**
 * A vector-Jacobian rule: given the node and the gradient of each output
 * (null where none flows), returns the gradient of each input (null where
 * `wants[i]` is false or the input is not differentiable).
 */
export type GradientRule = (tape: Tape, node: TapeNode, outputGrads: readonly (TapeValue | null)[], wants: readonly boolean[]) => (TapeValue | null)[];

const registry = new Map<string, GradientRule>();

/** Registers the rule of `opType`; a second registration of the same op throws. */
export function registerGradient(opType: string, rule: GradientRule): void {
  if (registry.has(opType)) throw new KernelError(`a gradient rule for '${opType}' is already registered`);
  registry.set(opType, rule);
}

/** The rule of `opType`, if one is registered. */
export function getGradient(opType: string): GradientRule | undefined {
  return registry.get(opType);
}

/** Op types that have a gradient rule. */
export function registeredGradients(): string[] {
  return [...registry.keys()].sort();
}

/** Sums `grad` over the axes along which a value of shape `dims` was broadcast. */
export function unbroadcast(tape: Tape, grad: TapeValue, dims: readonly number[]): TapeValue {
  if (grad.dims.join() === dims.join()) return grad;
  const lead = grad.dims.length - dims.length;
  const axes = grad.dims.map((d, i) => (i < lead || (dims[i - lead] === 1 && d !== 1) ? i : -1)).filter((i) => i >= 0);
  const summed = axes.length > 0 ? tape.op("ReduceSum", [grad, tape.int64s(axes)], { keepdims: attr.int(1) }) : grad;
  // summed: grad's rank with the broadcast axes kept as 1 -> dims
  return summed.dims.join() === dims.join() ? summed : tape.op("Reshape", [summed, tape.int64s(dims)]);
}
