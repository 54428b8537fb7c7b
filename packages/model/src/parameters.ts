/**
 * The flat parameter vector and its gradient: every parameter is a named
 * view into one Float32Array, so gradients are summed with one collective
 * and ZeRO can hand each rank a contiguous slice. Initialisation is
 * deterministic from (seed, parameter index) alone, so every rank and every
 * SP degree starts from the same weights.
 *
 * Two memory options. The values may live in memory the caller gives (one
 * copy that every rank of a process reads, a SharedArrayBuffer's view). And
 * the blocks' gradients may be streamed (streamBlockGradients): each block's
 * gradient run goes to a sink as the backward makes it (ZeRO-2 reduce-scatters
 * it there), so the flat gradient holds only the parameters outside the
 * blocks (the embedding, the final norm, an untied head).
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

/** Receives a streamed block gradient run: `values` are the gradients of flat elements [offset, offset + values.length), this rank's unreduced ones. */
export type BlockGradientSink = (offset: number, values: Float32Array) => Promise<void>;

/** A range of the flat vector whose gradient the store holds: flat elements [flat, flat + length) at grads[held, held + length). */
export interface HeldGradientRange {
  flat: number;
  held: number;
  length: number;
}

export interface ParameterStoreOptions {
  /** Memory for the values (exactly `size` elements, e.g. a view of a SharedArrayBuffer every rank of the process reads); default: the store's own. */
  values?: Float32Array;
}

export class ParameterStore {
  readonly specs: readonly ParamSpec[];
  readonly slots: ReadonlyMap<string, ParamSlot>;
  readonly size: number;
  /** All parameters back to back. */
  readonly values: Float32Array;
  /** The blocks' run of the flat vector, [begin, end): the parameters named `blocks.*`, contiguous (empty when there are none). */
  readonly blockRange: { begin: number; end: number };
  /** Made on first use (grads): a store that only views weights (an export, generation) never allocates one. */
  private gradients: Float32Array | null = null;
  private sink: BlockGradientSink | null = null;

  constructor(specs: readonly ParamSpec[], options: ParameterStoreOptions = {}) {
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
    if (options.values !== undefined && options.values.length !== offset)
      throw new ModelError(`the values given to the parameter store hold ${options.values.length} elements, the ${specs.length} parameters ${offset}`);
    this.values = options.values ?? new Float32Array(offset);
    this.blockRange = blockRangeOf(this.slots);
  }

  /**
   * The gradients: of every parameter, in the values' layout; or, once block
   * gradients are streamed, of the parameters outside the blocks only (the
   * ranges heldRanges() names, back to back).
   */
  get grads(): Float32Array {
    const { begin, end } = this.blockRange;
    this.gradients ??= new Float32Array(this.sink === null ? this.size : this.size - (end - begin));
    return this.gradients;
  }

  /** Elements of the gradient buffer the store holds now (0 when none is made: a store that never needed one, or one just dropped). */
  get heldGradientElements(): number {
    return this.gradients?.length ?? 0;
  }

  /**
   * Lets go of the held gradient buffer and returns its elements; the next
   * use of grads makes a new one, zeroed. For a caller that has moved the
   * held gradients elsewhere (ZeRO-2 reduce-scatters them into its slice) and
   * wants their memory back before the next phase, not the next step.
   */
  dropHeldGradients(): number {
    const elements = this.heldGradientElements;
    this.gradients = null;
    return elements;
  }

  /** Whether block gradients go to a sink (streamBlockGradients) rather than into grads. */
  get streamsBlockGradients(): boolean {
    return this.sink !== null;
  }

  /**
   * From now on every block's gradient run (accumulateRun within blockRange)
   * goes to `sink`, awaited, instead of into grads, and grads shrinks to the
   * parameters outside the blocks (zeroed; heldRanges() maps them).
   */
  streamBlockGradients(sink: BlockGradientSink): void {
    this.sink = sink;
    this.gradients = null;
  }

  /** Where each held gradient lives: the whole vector, or (streaming) the runs before and after the blocks. */
  heldRanges(): HeldGradientRange[] {
    if (this.sink === null) return [{ flat: 0, held: 0, length: this.size }];
    const { begin, end } = this.blockRange;
    return [
      { flat: 0, held: 0, length: begin },
      { flat: end, held: begin, length: this.size - end },
    ].filter((r) => r.length > 0);
  }

  /** Where parameter `slot`'s gradient starts in grads; throws for a block's while block gradients are streamed. */
  private gradOffset(name: string, slot: ParamSlot): number {
    if (this.sink === null) return slot.offset;
    const { begin, end } = this.blockRange;
    if (slot.offset >= begin && slot.offset < end)
      throw new ModelError(`the gradient of '${name}' is streamed to the block gradient sink (ZeRO-2), not held in the flat gradient`);
    return slot.offset < begin ? slot.offset : slot.offset - (end - begin);
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
    const slot = this.slot(name);
    const offset = this.gradOffset(name, slot);
    return new Tensor("float32", slot.spec.shape, this.grads.subarray(offset, offset + slot.size));
  }

  /** Adds `values` (same size as the parameter) into its gradient. */
  accumulate(name: string, values: Float32Array): void {
    const slot = this.slot(name);
    const { size } = slot;
    const offset = this.gradOffset(name, slot);
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
    const slot = this.slot(name);
    const { spec } = slot;
    const offset = this.gradOffset(name, slot);
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
    const slot = this.slot(name);
    const { spec } = slot;
    const offset = this.gradOffset(name, slot);
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
   * has one (the same bits); or, while block gradients are streamed, hands a
   * run within the blocks to the sink (resolving once it has taken them).
   */
  async accumulateRun(first: string, values: Float32Array, ops: Pick<BlockOps, "addInto"> = {}): Promise<void> {
    const slot = this.slot(first);
    const n = values.length;
    if (slot.offset + n > this.size) throw new ModelError(`gradient run from '${first}' (${n} values) overruns the ${this.size} parameters`);
    if (this.sink !== null && slot.offset >= this.blockRange.begin && slot.offset + n <= this.blockRange.end) {
      await this.sink(slot.offset, values);
      return;
    }
    const offset = this.gradOffset(first, slot);
    if (this.sink !== null && slot.offset + n > this.blockRange.begin && slot.offset < this.blockRange.end)
      throw new ModelError(`gradient run from '${first}' (${n} values) straddles the blocks' streamed gradients`);
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

/** The run of `blocks.*` parameters in the flat vector; throws when another parameter lies inside it. */
function blockRangeOf(slots: ReadonlyMap<string, ParamSlot>): { begin: number; end: number } {
  let begin = Number.POSITIVE_INFINITY;
  let end = 0;
  for (const [name, slot] of slots) {
    if (!name.startsWith("blocks.")) continue;
    begin = Math.min(begin, slot.offset);
    end = Math.max(end, slot.offset + slot.size);
  }
  if (end === 0) return { begin: 0, end: 0 };
  for (const [name, slot] of slots)
    if (!name.startsWith("blocks.") && slot.offset < end && slot.offset + slot.size > begin)
      throw new ModelError(`parameter '${name}' lies between the blocks' parameters: their gradients cannot be streamed as one run`);
  return { begin, end };
}
