/**
 * Reference elementwise activations in float64: GELU (tanh approximation) and
 * SwiGLU (silu(gate) * up), forward and backward.
 */
import { expectSameShape } from "../ops/validate.js";
import { zeros64, type F64, type Real } from "./float64.js";

/** sqrt(2 / pi), the GELU tanh approximation's scale. */
export const GELU_C = Math.sqrt(2 / Math.PI);
/** The cubic coefficient of the GELU tanh approximation. */
export const GELU_K = 0.044715;

/** gelu(x) = 0.5 x (1 + tanh(c (x + k x^3))) */
export function geluScalar(x: number): number {
  return 0.5 * x * (1 + Math.tanh(GELU_C * (x + GELU_K * x * x * x)));
}

/** d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 k x^2), t = tanh(c (x + k x^3)) */
export function geluDerivative(x: number): number {
  const t = Math.tanh(GELU_C * (x + GELU_K * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_C * (1 + 3 * GELU_K * x * x);
}

export function geluForward64(x: Real): F64 {
  const y = zeros64(x.shape);
  for (let i = 0; i < x.size; i++) y.data[i] = geluScalar(x.data[i]!);
  return y;
}

export function geluBackward64(x: Real, dy: Real): F64 {
  expectSameShape("geluBackward", ["x", "dy"], x, dy);
  const dx = zeros64(x.shape);
  for (let i = 0; i < x.size; i++) dx.data[i] = dy.data[i]! * geluDerivative(x.data[i]!);
  return dx;
}

function sigmoid(v: number): number {
  return 1 / (1 + Math.exp(-v));
}

export function swigluForward64(gate: Real, up: Real): F64 {
  expectSameShape("swigluForward", ["gate", "up"], gate, up);
  const y = zeros64(gate.shape);
  for (let i = 0; i < gate.size; i++) {
    const g = gate.data[i]!;
    y.data[i] = g * sigmoid(g) * up.data[i]!;
  }
  return y;
}

export function swigluBackward64(gate: Real, up: Real, dy: Real): { dGate: F64; dUp: F64 } {
  expectSameShape("swigluBackward", ["gate", "up"], gate, up);
  expectSameShape("swigluBackward", ["gate", "dy"], gate, dy);
  const dGate = zeros64(gate.shape);
  const dUp = zeros64(gate.shape);
  for (let i = 0; i < gate.size; i++) {
    const g = gate.data[i]!,
      s = sigmoid(g),
      d = dy.data[i]!;
    // d silu / dg = s (1 + g (1 - s))
    dGate.data[i] = d * up.data[i]! * s * (1 + g * (1 - s));
    dUp.data[i] = d * g * s;
  }
  return { dGate, dUp };
}
