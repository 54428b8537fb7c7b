/**
 * MLP activations as components, registered by name and chosen once, like
 * the norms: a block looks its MLP up when it is built and from then on calls
 * the component. A component names its input projections from norm2's output
 * (each [hidden, mlpHidden]: `mlp.up`, and `mlp.gate` for a gated unit),
 * combines their outputs into the activation that `mlp.down` reads, gives the
 * projections' gradients from the activation's, and writes itself as ONNX
 * nodes for the export. What backward reads is the projections' outputs,
 * which the block keeps. A new MLP is one file that builds its component plus
 * one `registerMlp` call.
 */
import type { BlockOps, GraphBuilder, Value } from "@ulysses/kernels";
import { attr } from "@ulysses/kernels";
import type { Tensor } from "@ulysses/tensors";
import { ComponentRegistry } from "./component-registry.js";

type F32 = Tensor<"float32">;

/** The MLP's input projections from norm2's output. */
export type MlpProjection = "mlp.gate" | "mlp.up";

export interface MlpComponent {
  readonly name: string;
  /** Its input projections, in the order forward runs them and `forward` receives their outputs (mlp.up last). */
  readonly projections: readonly MlpProjection[];
  /** The BlockOps methods it calls (empty: it computes on the tensors itself), so a run can name those without a native kernel. */
  readonly ops: readonly (keyof BlockOps)[];
  /** The projections' outputs [rows, mlpHidden], in `projections`' order -> the activation [rows, mlpHidden]. */
  forward(ops: BlockOps, inputs: readonly F32[]): Promise<F32>;
  /** The activation's gradient -> the gradients of the projections' outputs, in `projections`' order. */
  backward(ops: BlockOps, inputs: readonly F32[], dAct: F32): Promise<F32[]>;
  /** The ONNX nodes of its forward (absent: the ONNX export refuses the model, naming the MLP). */
  onnx?(g: GraphBuilder, inputs: readonly Value[]): Value;
}

const gelu: MlpComponent = {
  name: "gelu",
  projections: ["mlp.up"],
  ops: ["geluForward", "geluBackward"],
  forward: (ops, [up]) => ops.geluForward(up!),
  backward: async (ops, [up], dAct) => [await ops.geluBackward(up!, dAct)],
  // the tanh approximation, as the kernels compute it
  onnx: (g, [up]) => g.op("Gelu", [up!], { approximate: attr.string("tanh") }),
};

const swiglu: MlpComponent = {
  name: "swiglu",
  projections: ["mlp.gate", "mlp.up"],
  ops: ["swigluForward", "swigluBackward"],
  forward: (ops, [gate, up]) => ops.swigluForward(gate!, up!),
  backward: async (ops, [gate, up], dAct) => {
    const { dGate, dUp } = await ops.swigluBackward(gate!, up!, dAct);
    return [dGate, dUp];
  },
  // silu(gate) * up
  onnx: (g, [gate, up]) => g.op("Mul", [g.op("Mul", [gate!, g.op("Sigmoid", [gate!])]), up!]),
};

const mlps = new ComponentRegistry<MlpComponent>({ a: "an", name: "MLP" }, "mlp", [gelu, swiglu], ({ projections: p }) =>
  p.length > 0 && p.at(-1) === "mlp.up" && new Set(p).size === p.length && p.every((name) => name === "mlp.up" || name === "mlp.gate")
    ? null
    : `its projections are mlp.up, or mlp.gate then mlp.up, got [${p.join(", ")}]`,
);

/** Adds an MLP under its name (a name taken already is refused). */
export function registerMlp(component: MlpComponent): void {
  mlps.register(component);
}

/** The registered MLP of that name; a BlockError listing the registered names otherwise. */
export function mlpComponent(name: string): MlpComponent {
  return mlps.get(name);
}

/** The registered MLPs' names, built-ins first. */
export function mlpNames(): string[] {
  return mlps.names();
}
