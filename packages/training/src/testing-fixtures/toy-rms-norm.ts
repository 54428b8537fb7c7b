/**
 * A toy norm, the whole of it in this one file: RMSNorm written out in plain
 * loops with float64 sums, on the tensors directly (it never calls the ops).
 * y = x / sqrt(mean(x^2) + eps) * gamma. It exists to test the norm
 * registry: a model built with it must train exactly like one built with the
 * registered "rmsnorm", which runs the ops' own kernels.
 */
import type { NormComponent } from "@ulysses/block";
import { Tensor } from "@ulysses/tensors";

function rowsOf(x: Tensor<"float32">): [number, number] {
  const hidden = x.shape[x.rank - 1]!;
  return [x.size / hidden, hidden];
}

export const toyRmsNorm: NormComponent = {
  name: "toy-rms",
  weights: [{ suffix: "gamma", init: "ones" }],
  statsPerRow: 1,
  ops: [],
  async forward(_ops, x, w, eps) {
    const [rows, hidden] = rowsOf(x);
    const gamma = w.gamma!.data;
    const y = new Tensor("float32", x.shape);
    const rstd = new Tensor("float32", [rows]);
    for (let r = 0; r < rows; r++) {
      let squares = 0;
      for (let i = 0; i < hidden; i++) squares += x.data[r * hidden + i]! ** 2;
      const inv = 1 / Math.sqrt(squares / hidden + eps);
      rstd.data[r] = inv;
      for (let i = 0; i < hidden; i++) y.data[r * hidden + i] = x.data[r * hidden + i]! * inv * gamma[i]!;
    }
    return { y, saved: { rstd } };
  },
  async backward(_ops, x, w, saved, dy) {
    const [rows, hidden] = rowsOf(x);
    const gamma = w.gamma!.data;
    const dx = new Tensor("float32", x.shape);
    const dGamma = new Float64Array(hidden);
    for (let r = 0; r < rows; r++) {
      const inv = saved.rstd!.data[r]!;
      let dot = 0;
      for (let i = 0; i < hidden; i++) dot += gamma[i]! * dy.data[r * hidden + i]! * x.data[r * hidden + i]!;
      for (let i = 0; i < hidden; i++) {
        const xi = x.data[r * hidden + i]!;
        dx.data[r * hidden + i] = inv * gamma[i]! * dy.data[r * hidden + i]! - (xi * inv ** 3 * dot) / hidden;
        dGamma[i] += dy.data[r * hidden + i]! * xi * inv;
      }
    }
    return { dx, grads: { gamma: new Tensor("float32", [hidden], Float32Array.from(dGamma)) } };
  },
};
