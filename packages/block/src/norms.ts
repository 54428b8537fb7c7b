/**
 * Norms as components, registered by name and chosen once: a block (and the
 * model's final norm) looks its norm up when it is built and from then on
 * calls the component, never a name. A component says which weights it has
 * (gamma, and beta for LayerNorm), what it saves for backward, how it runs
 * forward and backward on the block's ops, and how it is written as ONNX
 * nodes for the export. A new norm is one file that builds its component plus
 * one `registerNorm` call.
 */
import type { BlockOps, GraphBuilder, Value } from "@ulysses/kernels";
import { attr } from "@ulysses/kernels";
import type { Tensor } from "@ulysses/tensors";
import { ComponentRegistry } from "./component-registry.js";

type F32 = Tensor<"float32">;

/** A norm's weights or their gradients, by suffix ("gamma", "beta"). */
export type NormTensors = Record<string, F32>;

export interface NormComponent {
  readonly name: string;
  /** Its weights over the hidden axis, by suffix, with their initial value (the first is "gamma"). */
  readonly weights: readonly { readonly suffix: string; readonly init: "ones" | "zeros" }[];
  /** Floats per row of the statistics forward saves for backward (the memory account's term). */
  readonly statsPerRow: number;
  /** The BlockOps methods it calls (empty: it computes on the tensors itself), so a run can name those without a native kernel. */
  readonly ops: readonly (keyof BlockOps)[];
  /** x [rows, hidden] -> y [rows, hidden] and what backward needs besides x and the weights. */
  forward(ops: BlockOps, x: F32, weights: NormTensors, eps: number): Promise<{ y: F32; saved: NormTensors }>;
  /** dy [rows, hidden] -> dx and the weights' gradients (by suffix). */
  backward(ops: BlockOps, x: F32, weights: NormTensors, saved: NormTensors, dy: F32): Promise<{ dx: F32; grads: NormTensors }>;
  /** The ONNX nodes of its forward over the last axis (absent: the ONNX export refuses the model, naming the norm). */
  onnx?(g: GraphBuilder, x: Value, weight: (suffix: string) => Value, eps: number): Value;
}

const layerNorm: NormComponent = {
  name: "layernorm",
  weights: [
    { suffix: "gamma", init: "ones" },
    { suffix: "beta", init: "zeros" },
  ],
  statsPerRow: 2,
  ops: ["layerNormForward", "layerNormBackward"],
  async forward(ops, x, w, eps) {
    const { y, mean, rstd } = await ops.layerNormForward(x, w.gamma!, w.beta!, eps);
    return { y, saved: { mean, rstd } };
  },
  async backward(ops, x, w, saved, dy) {
    const r = await ops.layerNormBackward(x, w.gamma!, { mean: saved.mean!, rstd: saved.rstd! }, dy);
    return { dx: r.dx, grads: { gamma: r.dGamma, beta: r.dBeta } };
  },
  onnx: (g, x, weight, eps) => g.op("LayerNormalization", [x, weight("gamma"), weight("beta")], { axis: attr.int(-1), epsilon: attr.float(eps) }),
};

const rmsNorm: NormComponent = {
  name: "rmsnorm",
  weights: [{ suffix: "gamma", init: "ones" }],
  statsPerRow: 1,
  ops: ["rmsNormForward", "rmsNormBackward"],
  async forward(ops, x, w, eps) {
    const { y, rstd } = await ops.rmsNormForward(x, w.gamma!, eps);
    return { y, saved: { rstd } };
  },
  async backward(ops, x, w, saved, dy) {
    const r = await ops.rmsNormBackward(x, w.gamma!, saved.rstd!, dy);
    return { dx: r.dx, grads: { gamma: r.dGamma } };
  },
  onnx: (g, x, weight, eps) => g.op("SimplifiedLayerNormalization", [x, weight("gamma")], { axis: attr.int(-1), epsilon: attr.float(eps) }),
};

const norms = new ComponentRegistry<NormComponent>({ a: "a", name: "norm" }, "norm", [layerNorm, rmsNorm], (c) =>
  c.weights[0]?.suffix === "gamma" ? null : "its first weight must be 'gamma'",
);

/** Adds a norm under its name (a name taken already is refused). */
export function registerNorm(component: NormComponent): void {
  norms.register(component);
}

/** The registered norm of that name; a BlockError listing the registered names otherwise. */
export function normComponent(name: string): NormComponent {
  return norms.get(name);
}

/** The registered norms' names, built-ins first. */
export function normNames(): string[] {
  return norms.names();
}
