/**
 * ReferenceOps: the "living definition" of the block's ops. Plain TypeScript,
 * float64 arithmetic inside, float32 tensors at the boundary. It is the oracle
 * the ONNX Runtime ops are tested against and a slow but complete BlockOps for
 * developing the block. The float64 functions it wraps (`*64`) are exported
 * for finite-difference tests.
 */
import type { Tensor } from "@ulysses/tensors";
import type { RopeScaling } from "../ops/rope-scaling.js";
import type { CrossEntropyResult, LayerNormSaved, RopePositions, TrainingOps } from "../ops/types.js";
import { geluBackward64, geluForward64, swigluBackward64, swigluForward64 } from "./activations.js";
import { crossEntropyBackward64, crossEntropyForward64, DEFAULT_IGNORE_INDEX, embeddingBackward64, embeddingForward64 } from "./embedding-loss.js";
import { toFloat32 } from "./float64.js";
import { linearBackward64, linearForward64, linearInputGradient64, linearWeightGradient64 } from "./linear.js";
import { layerNormBackward64, layerNormForward64, rmsNormBackward64, rmsNormForward64 } from "./norms.js";
import { ropeRotate64 } from "./rope.js";
import { expectShape } from "../ops/validate.js";

type F32 = Tensor<"float32">;

export const DEFAULT_ROPE_BASE = 10000;

export class ReferenceOps implements TrainingOps {
  async linearForward(x: F32, w: F32, b?: F32): Promise<F32> {
    return toFloat32(linearForward64(x, w, b));
  }

  async linearBackward(x: F32, w: F32, dy: F32, withBias: boolean): Promise<{ dx: F32; dw: F32; db?: F32 }> {
    const g = linearBackward64(x, w, dy, withBias);
    const out: { dx: F32; dw: F32; db?: F32 } = { dx: toFloat32(g.dx), dw: toFloat32(g.dw) };
    if (g.db) out.db = toFloat32(g.db);
    return out;
  }

  async linearInputGradient(w: F32, dy: F32): Promise<F32> {
    return toFloat32(linearInputGradient64(w, dy));
  }

  async linearWeightGradient(x: F32, dy: F32): Promise<F32> {
    return toFloat32(linearWeightGradient64(x, dy));
  }

  async layerNormForward(x: F32, gamma: F32, beta: F32, eps: number): Promise<{ y: F32 } & LayerNormSaved> {
    const r = layerNormForward64(x, gamma, beta, eps);
    return { y: toFloat32(r.y), mean: toFloat32(r.mean), rstd: toFloat32(r.rstd) };
  }

  async layerNormBackward(x: F32, gamma: F32, saved: LayerNormSaved, dy: F32): Promise<{ dx: F32; dGamma: F32; dBeta: F32 }> {
    const g = layerNormBackward64(x, gamma, saved.mean, saved.rstd, dy);
    return { dx: toFloat32(g.dx), dGamma: toFloat32(g.dGamma), dBeta: toFloat32(g.dBeta) };
  }

  async rmsNormForward(x: F32, gamma: F32, eps: number): Promise<{ y: F32; rstd: F32 }> {
    const r = rmsNormForward64(x, gamma, eps);
    return { y: toFloat32(r.y), rstd: toFloat32(r.rstd) };
  }

  async rmsNormBackward(x: F32, gamma: F32, rstd: F32, dy: F32): Promise<{ dx: F32; dGamma: F32 }> {
    const g = rmsNormBackward64(x, gamma, rstd, dy);
    return { dx: toFloat32(g.dx), dGamma: toFloat32(g.dGamma) };
  }

  async geluForward(x: F32): Promise<F32> {
    return toFloat32(geluForward64(x));
  }

  async geluBackward(x: F32, dy: F32): Promise<F32> {
    return toFloat32(geluBackward64(x, dy));
  }

  async swigluForward(gate: F32, up: F32): Promise<F32> {
    return toFloat32(swigluForward64(gate, up));
  }

  async swigluBackward(gate: F32, up: F32, dy: F32): Promise<{ dGate: F32; dUp: F32 }> {
    const g = swigluBackward64(gate, up, dy);
    return { dGate: toFloat32(g.dGate), dUp: toFloat32(g.dUp) };
  }

  async ropeForward(x: F32, positions: RopePositions, base = DEFAULT_ROPE_BASE, scaling?: RopeScaling): Promise<F32> {
    return toFloat32(ropeRotate64(x, positions, base, 1, "ropeForward", scaling));
  }

  async ropeBackward(dy: F32, positions: RopePositions, base = DEFAULT_ROPE_BASE, scaling?: RopeScaling): Promise<F32> {
    return toFloat32(ropeRotate64(dy, positions, base, -1, "ropeBackward", scaling));
  }

  async embeddingForward(ids: Tensor<"int32">, table: F32): Promise<F32> {
    return toFloat32(embeddingForward64(ids, table));
  }

  async embeddingBackward(ids: Tensor<"int32">, dy: F32, vocab: number, into?: F32): Promise<F32> {
    const grad = embeddingBackward64(ids, dy, vocab);
    if (into === undefined) return toFloat32(grad);
    expectShape("embeddingBackward", "into", into, [vocab, dy.shape[dy.rank - 1]!]);
    // the float64 sum of this call's rows, rounded once as it is added
    for (let i = 0; i < into.size; i++) into.data[i] = into.data[i]! + grad.data[i]!;
    return into;
  }

  async crossEntropyForward(logits: F32, labels: Tensor<"int32">, ignoreIndex = DEFAULT_IGNORE_INDEX): Promise<CrossEntropyResult> {
    return crossEntropyForward64(logits, labels, ignoreIndex);
  }

  async crossEntropyBackward(logits: F32, labels: Tensor<"int32">, gradScale: number, ignoreIndex = DEFAULT_IGNORE_INDEX): Promise<F32> {
    return toFloat32(crossEntropyBackward64(logits, labels, gradScale, ignoreIndex));
  }
}

/**
 * ReferenceOps whose `release` overwrites every released float tensor with
 * NaN on the spot and records every released tensor: for tests of code that
 * calls BlockOps.release. A tensor read after its release then shows in the
 * results (compare them with plain ReferenceOps'), and `released` tells what
 * was given back.
 */
export class PoisoningOps extends ReferenceOps {
  readonly released: Tensor[] = [];

  release(...tensors: Tensor[]): void {
    for (const t of tensors) {
      this.released.push(t);
      if (t.dtype === "float32" || t.dtype === "float64") (t.data as Float32Array | Float64Array).fill(Number.NaN);
    }
  }
}
