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
 *
 * Sharded (ZeRO-3, `shard`): the store holds only its rank's slice of the
 * flat vector (`owned`, the slice evenSplitSizes gives rank r of R), and a
 * parameter is read by gathering it from every rank's slice (`gather`,
 * `gatherParameter`, through the collective the Trainer installs with
 * `gatherWith`). `value` and `values` are then refused: nothing views weights
 * that this rank does not hold.
 */
import { Rng, Tensor, evenSplitSizes } from "@ulysses/tensors";
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

/** Fills `into` with flat elements [at, at + into.length) of the weights, gathered from the ranks' slices (a collective: every rank calls it with the same range). */
export type WeightGatherer = (at: number, into: Float32Array) => Promise<void>;

export interface ParameterStoreOptions {
  /** Memory for the values (exactly `size` elements, e.g. a view of a SharedArrayBuffer every rank of the process reads); default: the store's own. */
  values?: Float32Array;
  /** Hold only rank `rank`'s slice of `ranks` (evenSplitSizes of the flat vector): ZeRO-3's sharded weights. */
  shard?: { rank: number; ranks: number };
}

export class ParameterStore {
  readonly specs: readonly ParamSpec[];
  readonly slots: ReadonlyMap<string, ParamSlot>;
  readonly size: number;
  /** The flat elements this store holds, [offset, offset + length): everything, or (sharded) one rank's slice. */
  readonly shard: { offset: number; length: number };
  /** The values of `shard` (all parameters back to back when it is everything): what this rank updates. */
  readonly owned: Float32Array;
  /** The blocks' run of the flat vector, [begin, end): the parameters named `blocks.*`, contiguous (empty when there are none). */
  readonly blockRange: { begin: number; end: number };
  /** Made on first use (grads): a store that only views weights (an export, generation) never allocates one. */
  private gradients: Float32Array | null = null;
  private sink: BlockGradientSink | null = null;
  private gatherer: WeightGatherer | null = null;
  /** The latest gather (sharded): each starts once the one before it ended, so gathers run in call order even when one is started early (a prefetch). */
  private gathering: Promise<void> = Promise.resolve();

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
    if (options.values !== undefined && options.shard !== undefined)
      throw new ModelError("the parameter store takes memory for all the values or a shard of them, not both");
    if (options.shard === undefined) this.shard = { offset: 0, length: offset };
    else {
      const { rank, ranks } = options.shard;
      if (!Number.isSafeInteger(ranks) || ranks < 1 || !Number.isSafeInteger(rank) || rank < 0 || rank >= ranks)
        throw new ModelError(`parameter shard: rank ${rank} of ${ranks} is not a rank (0 .. ranks - 1 of a positive count)`);
      const sizes = evenSplitSizes(offset, ranks);
      this.shard = { offset: sizes.slice(0, rank).reduce((a, b) => a + b, 0), length: sizes[rank]! };
    }
    this.owned = options.values ?? new Float32Array(this.shard.length);
    this.blockRange = blockRangeOf(this.slots);
  }

  /** Whether this store holds only a slice of the weights (ZeRO-3 over more than one rank). */
  get sharded(): boolean {
    return this.shard.length !== this.size;
  }

  /** All parameters back to back; refused when the store is sharded (read them with gather). */
  get values(): Float32Array {
    if (this.sharded)
      throw new ModelError(
        `the weights are sharded (ZeRO-3): this rank holds flat elements [${this.shard.offset}, ${this.shard.offset + this.shard.length}) of ${this.size}; gather what you read`,
      );
    return this.owned;
  }

  /** Installs the collective that gathers the ranks' slices (the Trainer's, under ZeRO-3). */
  gatherWith(gatherer: WeightGatherer): void {
    this.gatherer = gatherer;
  }

  /**
   * Flat elements [at, at + into.length) into `into`: copied when the store
   * holds them all, else gathered from every rank (collective). Gathers run
   * one at a time in the order they were called, whenever they are awaited.
   */
  async gather(at: number, into: Float32Array): Promise<void> {
    if (!Number.isSafeInteger(at) || at < 0 || at + into.length > this.size)
      throw new ModelError(`gather: elements [${at}, ${at + into.length}) lie outside the ${this.size} parameters`);
    if (!this.sharded) {
      into.set(this.owned.subarray(at, at + into.length));
      return;
    }
    const gatherer = this.gatherer;
    if (gatherer === null) throw new ModelError("the weights are sharded (ZeRO-3) and no gatherer is installed (the Trainer installs it)");
    // A gather is a run of collectives: two of them interleaved would pair one rank's chunk with another's
    const run = this.gathering.then(() => gatherer(at, into));
    this.gathering = run.catch(() => undefined);
    await run;
  }

  /** Parameter `name` whole: a view of the values, or (sharded) a new tensor gathered from every rank (collective). */
  async gatherParameter(name: string): Promise<F32> {
    if (!this.sharded) return this.value(name);
    const { spec, offset, size } = this.slot(name);
    const data = new Float32Array(size);
    await this.gather(offset, data);
    return new Tensor("float32", spec.shape, data);
  }

  /** Sets parameter `name` to `values` (all of its elements): the part this store holds. */
  setParameter(name: string, values: Float32Array): void {
    const { size } = this.slot(name);
    if (values.length !== size) throw new ModelError(`'${name}' has ${size} elements, the values given ${values.length}`);
    const { begin, end, view } = this.heldPart(name);
    view.set(values.subarray(begin, end));
  }

  /** Where parameter `name` meets the shard: its elements [begin, end) that this store holds (empty when none), and their values (a view of `owned`). */
  heldPart(name: string): { begin: number; end: number; view: Float32Array } {
    const { offset, size } = this.slot(name);
    const begin = Math.max(0, this.shard.offset - offset);
    const end = Math.min(size, this.shard.offset + this.shard.length - offset);
    if (end <= begin) return { begin: 0, end: 0, view: this.owned.subarray(0, 0) };
    const at = offset + begin - this.shard.offset;
    return { begin, end, view: this.owned.subarray(at, at + end - begin) };
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

  /** The parameter as a tensor viewing the flat vector (refused when sharded: gatherParameter). */
  value(name: string): F32 {
    const { spec, offset, size } = this.slot(name);
    if (this.sharded) throw new ModelError(`'${name}': the weights are sharded (ZeRO-3), so no view of a whole parameter exists; gather it (gatherParameter)`);
    return new Tensor("float32", spec.shape, this.owned.subarray(offset, offset + size));
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

  /** Seeded initialisation: parameter i draws from Rng(seed, i + 1) (sharded: the same values, the slice kept). */
  initialise(seed: number): void {
    this.specs.forEach((spec, index) => {
      const { begin, end, view } = this.heldPart(spec.name);
      if (end === begin) return;
      const { size } = this.slot(spec.name);
      if (spec.init !== "normal") view.fill(spec.init === "ones" ? 1 : 0);
      else if (end - begin === size) new Rng(seed, index + 1).fillNormal(view, 0, spec.std);
      else {
        // the whole parameter's draws, so that every shard holds the unsharded values
        const all = new Float32Array(size);
        new Rng(seed, index + 1).fillNormal(all, 0, spec.std);
        view.set(all.subarray(begin, end));
      }
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
