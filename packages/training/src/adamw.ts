/**
 * AdamW (Loshchilov & Hutter) with decoupled weight decay, over one
 * contiguous slice [offset, offset + length) of a flat parameter vector. With
 * no sharding the slice is the whole vector; under ZeRO-1 each rank owns one
 * slice (its optimizer state is only that slice) and the caller all-gathers
 * the updated parameters. State (m, v) is float32, the arithmetic of one
 * element's update is done in float64 and rounded on store.
 *
 *   p <- p - lr * weightDecay * decay[i] * p
 *   m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
 *   p <- p - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *
 * The last line is PyTorch's form of the bias-corrected step, with the
 * division by sqrt(1 - b2^t) done as a multiplication by its reciprocal
 * (computed once per step): one division and one square root per element.
 */
import type { AdamWUpdate } from "@ulysses/kernels";
import { TrainingError } from "./errors.js";

export interface AdamWOptions {
  beta1?: number;
  beta2?: number;
  eps?: number;
  weightDecay?: number;
}

/** One step's constants: the learning rate, the bias corrections 1 - b1^t and 1 - b2^t, and lr x weight decay. */
interface StepConstants {
  lr: number;
  c1: number;
  c2: number;
  decay: number;
}

export class AdamW {
  readonly offset: number;
  readonly length: number;
  readonly beta1: number;
  readonly beta2: number;
  readonly eps: number;
  readonly weightDecay: number;
  /** First moment of this slice. */
  readonly m: Float32Array;
  /** Second moment of this slice. */
  readonly v: Float32Array;
  /** Number of steps taken. */
  step = 0;
  /** 1 where weight decay applies (indexed like the slice), or null for everywhere. */
  private readonly decayMask: Uint8Array | null;

  constructor(slice: { offset: number; length: number; decayMask?: Uint8Array | null }, options: AdamWOptions = {}) {
    this.offset = slice.offset;
    this.length = slice.length;
    if (!Number.isInteger(this.offset) || this.offset < 0 || !Number.isInteger(this.length) || this.length < 0) {
      throw new TrainingError(`AdamW slice must have non-negative integer offset and length, got offset ${slice.offset}, length ${slice.length}`);
    }
    this.beta1 = options.beta1 ?? 0.9;
    this.beta2 = options.beta2 ?? 0.95;
    this.eps = options.eps ?? 1e-8;
    this.weightDecay = options.weightDecay ?? 0.1;
    if (!(this.beta1 >= 0 && this.beta1 < 1 && this.beta2 >= 0 && this.beta2 < 1)) {
      throw new TrainingError(`AdamW betas must lie in [0, 1), got ${this.beta1}, ${this.beta2}`);
    }
    this.decayMask = slice.decayMask ?? null;
    if (this.decayMask && this.decayMask.length !== this.length) {
      throw new TrainingError(`AdamW decay mask has ${this.decayMask.length} entries for a slice of ${this.length}`);
    }
    this.m = new Float32Array(this.length);
    this.v = new Float32Array(this.length);
    // A new Float32Array is untouched zero pages: written here, the moments are resident from the start, as in every
    // step after the first, so the first step's peak memory is the run's and a run that does not fit fails in it.
    this.m.fill(0);
    this.v.fill(0);
  }

  /**
   * One update of params[offset, offset + length) from grads indexed the same
   * way (both full flat vectors, or both exactly the slice when `sliceOnly`).
   * `kernel` (BlockOps.adamwUpdate) runs the loop below natively with the
   * same arithmetic: the same bits.
   */
  update(params: Float32Array, grads: Float32Array, lr: number, sliceOnly = false, kernel?: (update: AdamWUpdate) => void): void {
    const base = sliceOnly ? 0 : this.offset;
    if (params.length < base + this.length || grads.length < base + this.length) {
      throw new TrainingError(`AdamW slice [${this.offset}, ${this.offset + this.length}) does not fit params (${params.length}) and grads (${grads.length})`);
    }
    const step = this.nextStep(lr);
    this.updateRange(step, params.subarray(base, base + this.length), grads.subarray(base, base + this.length), 0, kernel);
  }

  /**
   * One update of the slice `params` (exactly the slice) whose gradient is
   * read a part at a time: `read(from, out)` fills `out` with the gradient of
   * slice elements [from, from + out.length), parts of at most
   * `scratch.length` (a gradient stored in another dtype, converted as it is
   * read). Elementwise, so the same bits as `update` on the whole gradient.
   */
  updateInParts(
    params: Float32Array,
    lr: number,
    read: (from: number, out: Float32Array) => void,
    scratch: Float32Array,
    kernel?: (update: AdamWUpdate) => void,
  ): void {
    if (params.length !== this.length) throw new TrainingError(`AdamW slice of ${this.length} elements given params of ${params.length}`);
    if (scratch.length === 0 && this.length > 0) throw new TrainingError("AdamW.updateInParts needs a scratch of at least one element");
    const step = this.nextStep(lr);
    for (let from = 0; from < this.length; from += scratch.length) {
      const n = Math.min(scratch.length, this.length - from);
      const grads = scratch.subarray(0, n);
      read(from, grads);
      this.updateRange(step, params.subarray(from, from + n), grads, from, kernel);
    }
  }

  /** Counts a step and returns its constants. */
  private nextStep(lr: number): StepConstants {
    this.step += 1;
    return { lr, c1: 1 - this.beta1 ** this.step, c2: 1 - this.beta2 ** this.step, decay: lr * this.weightDecay };
  }

  /** The update of slice elements [at, at + params.length): `params` and `grads` are views of just those. */
  private updateRange(step: StepConstants, params: Float32Array, grads: Float32Array, at: number, kernel?: (update: AdamWUpdate) => void): void {
    const { beta1, beta2, eps } = this;
    const { lr, c1, c2, decay } = step;
    const n = params.length;
    const m = this.m.subarray(at, at + n);
    const v = this.v.subarray(at, at + n);
    const decayMask = this.decayMask === null ? null : this.decayMask.subarray(at, at + n);
    if (kernel !== undefined) {
      kernel({ params, grads, m, v, decayMask, beta1, beta2, eps, lr, decay, c1, c2 });
      return;
    }
    const stepSize = lr / c1;
    const invSqrtC2 = 1 / Math.sqrt(c2);
    for (let i = 0; i < n; i++) {
      const g = grads[i]!;
      let p = params[i]!;
      if (decayMask === null || decayMask[i] === 1) p -= decay * p;
      const mi = beta1 * m[i]! + (1 - beta1) * g;
      const vi = beta2 * v[i]! + (1 - beta2) * g * g;
      m[i] = mi;
      v[i] = vi;
      params[i] = p - (stepSize * mi) / (Math.sqrt(vi) * invSqrtC2 + eps);
    }
  }
}
