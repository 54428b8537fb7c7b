/**
 * Reference LayerNorm and RMSNorm over the last axis in float64, forward and
 * backward. Backward uses the saved statistics it is given, as the real ops do.
 */
import { expectSameShape, expectShape, rowsAndLast } from "../ops/validate.js";
import { zeros64, type F64, type Real } from "./float64.js";

export function layerNormForward64(x: Real, gamma: Real, beta: Real, eps: number): { y: F64; mean: F64; rstd: F64 } {
  const { rows, last: h } = rowsAndLast("layerNormForward", "x", x);
  expectShape("layerNormForward", "gamma", gamma, [h]);
  expectShape("layerNormForward", "beta", beta, [h]);
  const y = zeros64(x.shape);
  const mean = zeros64([rows]);
  const rstd = zeros64([rows]);
  for (let r = 0; r < rows; r++) {
    const o = r * h;
    let m = 0;
    for (let i = 0; i < h; i++) m += x.data[o + i]!;
    m /= h;
    let v = 0;
    for (let i = 0; i < h; i++) v += (x.data[o + i]! - m) ** 2;
    const s = 1 / Math.sqrt(v / h + eps);
    for (let i = 0; i < h; i++) y.data[o + i] = (x.data[o + i]! - m) * s * gamma.data[i]! + beta.data[i]!;
    mean.data[r] = m;
    rstd.data[r] = s;
  }
  return { y, mean, rstd };
}

export function layerNormBackward64(x: Real, gamma: Real, mean: Real, rstd: Real, dy: Real): { dx: F64; dGamma: F64; dBeta: F64 } {
  const { rows, last: h } = rowsAndLast("layerNormBackward", "x", x);
  expectSameShape("layerNormBackward", ["x", "dy"], x, dy);
  expectShape("layerNormBackward", "gamma", gamma, [h]);
  expectShape("layerNormBackward", "mean", mean, [rows]);
  expectShape("layerNormBackward", "rstd", rstd, [rows]);
  const dx = zeros64(x.shape);
  const dGamma = zeros64([h]);
  const dBeta = zeros64([h]);
  const xhat = new Float64Array(h);
  const g = new Float64Array(h);
  for (let r = 0; r < rows; r++) {
    const o = r * h;
    const m = mean.data[r]!,
      s = rstd.data[r]!;
    let meanG = 0,
      meanGx = 0;
    for (let i = 0; i < h; i++) {
      xhat[i] = (x.data[o + i]! - m) * s;
      g[i] = dy.data[o + i]! * gamma.data[i]!;
      meanG += g[i]!;
      meanGx += g[i]! * xhat[i]!;
      dGamma.data[i] += dy.data[o + i]! * xhat[i]!;
      dBeta.data[i] += dy.data[o + i]!;
    }
    meanG /= h;
    meanGx /= h;
    for (let i = 0; i < h; i++) dx.data[o + i] = s * (g[i]! - meanG - xhat[i]! * meanGx);
  }
  return { dx, dGamma, dBeta };
}

export function rmsNormForward64(x: Real, gamma: Real, eps: number): { y: F64; rstd: F64 } {
  const { rows, last: h } = rowsAndLast("rmsNormForward", "x", x);
  expectShape("rmsNormForward", "gamma", gamma, [h]);
  const y = zeros64(x.shape);
  const rstd = zeros64([rows]);
  for (let r = 0; r < rows; r++) {
    const o = r * h;
    let ms = 0;
    for (let i = 0; i < h; i++) ms += x.data[o + i]! ** 2;
    const s = 1 / Math.sqrt(ms / h + eps);
    for (let i = 0; i < h; i++) y.data[o + i] = x.data[o + i]! * s * gamma.data[i]!;
    rstd.data[r] = s;
  }
  return { y, rstd };
}

export function rmsNormBackward64(x: Real, gamma: Real, rstd: Real, dy: Real): { dx: F64; dGamma: F64 } {
  const { rows, last: h } = rowsAndLast("rmsNormBackward", "x", x);
  expectSameShape("rmsNormBackward", ["x", "dy"], x, dy);
  expectShape("rmsNormBackward", "gamma", gamma, [h]);
  expectShape("rmsNormBackward", "rstd", rstd, [rows]);
  const dx = zeros64(x.shape);
  const dGamma = zeros64([h]);
  for (let r = 0; r < rows; r++) {
    const o = r * h;
    const s = rstd.data[r]!;
    // y_i = x_i s g_i, ds/dx_j = -s^3 x_j / h  =>  dx_j = s (g_j dy_j - x_j s^2 mean_i(g_i dy_i x_i))
    let meanGx = 0;
    for (let i = 0; i < h; i++) {
      meanGx += dy.data[o + i]! * gamma.data[i]! * x.data[o + i]!;
      dGamma.data[i] += dy.data[o + i]! * x.data[o + i]! * s;
    }
    meanGx /= h;
    for (let i = 0; i < h; i++) {
      dx.data[o + i] = s * (dy.data[o + i]! * gamma.data[i]! - x.data[o + i]! * s * s * meanGx);
    }
  }
  return { dx, dGamma };
}
