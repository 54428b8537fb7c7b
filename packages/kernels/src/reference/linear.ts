/**
 * Reference linear layer in float64: y = x @ w (+ b) over any leading axes of
 * x, and its gradients. Plain loops; the oracle, not the fast path.
 */
import { linearGradientShapes, linearShapes } from "../ops/validate.js";
import { zeros64, type F64, type Real } from "./float64.js";

export function linearForward64(x: Real, w: Real, b?: Real): F64 {
  const { rows, inF, outF } = linearShapes("linearForward", x, w, b);
  // y: [...x.shape[:-1], out]
  const y = zeros64([...x.shape.slice(0, -1), outF]);
  const xd = x.data,
    wd = w.data,
    yd = y.data;
  for (let r = 0; r < rows; r++) {
    const yRow = r * outF;
    if (b) for (let o = 0; o < outF; o++) yd[yRow + o] = b.data[o]!;
    for (let i = 0; i < inF; i++) {
      const xv = xd[r * inF + i]!;
      const wRow = i * outF;
      for (let o = 0; o < outF; o++) yd[yRow + o] += xv * wd[wRow + o]!;
    }
  }
  return y;
}

export function linearBackward64(x: Real, w: Real, dy: Real, withBias: boolean): { dx: F64; dw: F64; db?: F64 } {
  const { rows, inF, outF } = linearShapes("linearBackward", x, w);
  const dx = zeros64(x.shape);
  const dw = zeros64(w.shape);
  const xd = x.data,
    wd = w.data,
    gd = dy.data;
  for (let r = 0; r < rows; r++) {
    for (let i = 0; i < inF; i++) {
      const xv = xd[r * inF + i]!;
      let acc = 0;
      for (let o = 0; o < outF; o++) {
        const g = gd[r * outF + o]!;
        acc += g * wd[i * outF + o]!;
        dw.data[i * outF + o] += xv * g;
      }
      dx.data[r * inF + i] = acc;
    }
  }
  if (!withBias) return { dx, dw };
  const db = zeros64([outF]);
  for (let r = 0; r < rows; r++) for (let o = 0; o < outF; o++) db.data[o] += gd[r * outF + o]!;
  return { dx, dw, db };
}

/** dy [..., out] @ w^T -> [..., in]. */
export function linearInputGradient64(w: Real, dy: Real): F64 {
  const { rows, inF, outF } = linearGradientShapes("linearInputGradient", w, dy, "x");
  const dx = zeros64([...dy.shape.slice(0, -1), inF]);
  for (let r = 0; r < rows; r++) {
    for (let i = 0; i < inF; i++) {
      let acc = 0;
      for (let o = 0; o < outF; o++) acc += dy.data[r * outF + o]! * w.data[i * outF + o]!;
      dx.data[r * inF + i] = acc;
    }
  }
  return dx;
}

/** x^T @ dy over all rows -> [in, out]. */
export function linearWeightGradient64(x: Real, dy: Real): F64 {
  const { rows, inF, outF } = linearGradientShapes("linearWeightGradient", x, dy, "w");
  const dw = zeros64([inF, outF]);
  for (let r = 0; r < rows; r++) {
    for (let i = 0; i < inF; i++) {
      const xv = x.data[r * inF + i]!;
      for (let o = 0; o < outF; o++) dw.data[i * outF + o] += xv * dy.data[r * outF + o]!;
    }
  }
  return dw;
}
