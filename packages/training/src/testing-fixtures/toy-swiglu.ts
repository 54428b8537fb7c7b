/**
 * A toy MLP, the whole of it in this one file: SwiGLU written out in plain
 * loops on the tensors directly (it never calls the ops), silu(gate) * up
 * with silu(g) = g / (1 + e^-g). It exists to test the MLP registry: a model
 * built with it must train exactly like one built with the registered
 * "swiglu", which runs the ops' own kernels.
 */
import type { MlpComponent } from "@ulysses/block";
import { Tensor } from "@ulysses/tensors";

const sigmoid = (g: number) => 1 / (1 + Math.exp(-g));

export const toySwiglu: MlpComponent = {
  name: "toy-swiglu",
  projections: ["mlp.gate", "mlp.up"],
  ops: [],
  async forward(_ops, [gate, up]) {
    const y = new Tensor("float32", gate!.shape);
    for (let i = 0; i < y.size; i++) y.data[i] = gate!.data[i]! * sigmoid(gate!.data[i]!) * up!.data[i]!;
    return y;
  },
  async backward(_ops, [gate, up], dAct) {
    const dGate = new Tensor("float32", gate!.shape);
    const dUp = new Tensor("float32", up!.shape);
    for (let i = 0; i < dAct.size; i++) {
      const g = gate!.data[i]!;
      const s = sigmoid(g);
      dUp.data[i] = dAct.data[i]! * g * s;
      // d silu / dg = s (1 + g (1 - s))
      dGate.data[i] = dAct.data[i]! * up!.data[i]! * s * (1 + g * (1 - s));
    }
    return [dGate, dUp];
  },
};
