/**
 * The flat parameter vector and its gradient: every parameter is a named
 * view into one Float32Array, so gradients are summed with one collective
 * and ZeRO-1 can hand each rank a contiguous slice. Initialisation is
 * deterministic from (seed, parameter index) alone, so every rank and every
 * SP degree starts from the same weights.
 */
import { Rng, Tensor } from "@ulysses/tensors";
import { addWith } from "@ulysses/block";
import type { BlockOps } from "@ulysses/kernels";
import { ModelError } from "./errors.js";
import type { ParamSpec } from "./gpt-config.js";

type F32 = Tensor<"float32">;

export interface ParamSlot {
  readonly spec: ParamSpec;
  readonly offset: number;
  readonly size: number;
}

export class ParameterStore {
  readonly specs: readonly ParamSpec[];
  readonly slots: ReadonlyMap<string, ParamSlot>;
  readonly size: number;
  /** All parameters back to back. */
  readonly values: Float32Array;
  /** Their gradients, same layout. */
  readonly grads: Float32Array;

  constructor(specs: readonly ParamSpec[]) {
    this.specs = specs;
    const slots = new Map<string, ParamSlot>();
    let offset = 0;
    for (const spec of specs) {
      if (slots.has(spec.name)) throw new ModelError(`parameter '${spec.name}' is listed twice`);
      const size = spec.shape.reduce((a, b) => a * b, 1);
      slots.set(spec.name, { spec, offset, size });
      offset += size;
    }
    this.slots = slots;
    this.size = offset;
    this.values = new Float32Array(offset);
    this.grads = new Float32Array(offset);
  }

  private slot(name: string): ParamSlot {
    const slot = this.slots.get(name);
    if (slot === undefined) throw new ModelError(`no parameter '${name}'; known: ${[...this.slots.keys()].join(", ")}`);
    return slot;
  }

  /** The parameter as a tensor viewing the flat vector. */
  value(name: string): F32 {
    const { spec, offset, size } = this.slot(name);
    return new Tensor("float32", spec.shape, this.values.subarray(offset, offset + size));
  }

  /** The gradient as a tensor viewing the flat gradient. */
  grad(name: string): F32 {
    const { spec, offset, size } = this.slot(name);
    return new Tensor("float32", spec.shape, this.grads.subarray(offset, offset + size));
  }

  /** Adds `values` (same size as the parameter) into its gradient. */
  accumulate(name: string, values: Float32Array): void {
    const { offset, size } = this.slot(name);
    if (values.length !== size) throw new ModelError(`gradient for '${name}' has ${values.length} values, the parameter ${size}`);
    const g = this.grads;
    for (let i = 0; i < size; i++) g[offset + i] += values[i]!;
  }

  /**
   * Adds `values` [a, c] into columns firstColumn .. firstColumn + c of the
   * gradient of an [a, b] parameter (a block of the LM head's [hidden, vocab]
   * gradient).
   */
  accumulateColumns(name: string, values: F32, firstColumn: number): void {
    const { spec, offset } = this.slot(name);
    const [a, c] = values.shape as [number, number];
    const b = spec.shape[1]!;
    if (values.rank !== 2 || spec.shape.length !== 2 || spec.shape[0] !== a || !Number.isSafeInteger(firstColumn) || firstColumn < 0 || firstColumn + c > b)
      throw new ModelError(
        `gradient columns ${firstColumn} .. ${firstColumn + c} ([${values.shape.join(", ")}]) do not fit '${name}' [${spec.shape.join(", ")}]`,
      );
    const g = this.grads;
    const v = values.data;
    for (let i = 0; i < a; i++) {
      const row = offset + i * b + firstColumn;
      for (let j = 0; j < c; j++) g[row + j] += v[i * c + j]!;
    }
  }

  /**
   * Adds the transpose of `values` [a, c] into rows firstRow .. firstRow + c
   * of the gradient of a [b, a] parameter, without a transposed copy (the
   * tied LM head's gradient [hidden, vocab], or a block of its columns, into
   * the embedding's [vocab, hidden]).
   */
  accumulateTransposed(name: string, values: F32, firstRow = 0): void {
    const { spec, offset } = this.slot(name);
    const [a, c] = values.shape as [number, number];
    if (values.rank !== 2 || spec.shape.length !== 2 || spec.shape[1] !== a || !Number.isSafeInteger(firstRow) || firstRow < 0 || firstRow + c > spec.shape[0]!)
      throw new ModelError(`transposed gradient [${values.shape.join(", ")}] at row ${firstRow} does not fit '${name}' [${spec.shape.join(", ")}]`);
    const g = this.grads;
    const v = values.data;
    for (let i = 0; i < a; i++) for (let j = 0; j < c; j++) g[offset + (firstRow + j) * a + i] += v[i * c + j]!;
  }

  /**
   * Adds a run of consecutive parameters' gradients starting at `first` (the
   * layout of a block's flat gradient), with `ops`' native addInto when it
   * has one (the same bits).
   */
  accumulateRun(first: string, values: Float32Array, ops: Pick<BlockOps, "addInto"> = {}): void {
    const { offset } = this.slot(first);
    if (offset + values.length > this.size) throw new ModelError(`gradient run from '${first}' (${values.length} values) overruns the ${this.size} parameters`);
    const n = values.length;
    addWith(ops, new Tensor("float32", [n], this.grads.subarray(offset, offset + n)), new Tensor("float32", [n], values));
  }

  /** Seeded initialisation: parameter i draws from Rng(seed, i + 1). */
  initialise(seed: number): void {
    this.specs.forEach((spec, index) => {
      const view = this.value(spec.name).data;
      if (spec.init === "normal") new Rng(seed, index + 1).fillNormal(view, 0, spec.std);
      else view.fill(spec.init === "ones" ? 1 : 0);
    });
  }

  /** 1 where weight decay applies, for each element of [offset, offset + length). */
  decayMask(offset = 0, length = this.size): Uint8Array {
    const mask = new Uint8Array(length);
    for (const { spec, offset: start, size } of this.slots.values()) {
      if (!spec.decay) continue;
      const from = Math.max(start, offset);
      const to = Math.min(start + size, offset + length);
      if (to > from) mask.fill(1, from - offset, to - offset);
    }
    return mask;
  }
}
