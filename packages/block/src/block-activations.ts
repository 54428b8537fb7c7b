/**
 * What a TransformerBlock's forward keeps for its backward: the call's
 * inputs, the activations the recorder saved (each taken out as backward
 * reads it), the context handed to the caller, and the gradients passed
 * between backward stages.
 */
import type { AttentionDocuments, RopePositions } from "@ulysses/kernels";
import { toDType, type Tensor } from "@ulysses/tensors";
import type { BlockAttention, BlockAttentionContext, KeptAttention } from "./block-attention.js";
import type { LinearName, NormName } from "./block-forward.js";
import type { BlockWeights, QkNormName } from "./block-weights.js";
import { BlockError } from "./errors.js";
import type { NormTensors } from "./norms.js";
import type { BlockForwardOptions } from "./block-options.js";
import type { TransformerBlock } from "./transformer-block.js";

type F32 = Tensor<"float32">;

/** What a forward was called with, kept for backward (and the recompute under checkpointing). */
export interface Inputs {
  positions: RopePositions;
  documents: AttentionDocuments | undefined;
  /** BlockForwardOptions.attentionRun. */
  run: unknown;
}

export type NormSaved = NormTensors;
export interface NormRecord {
  /** The norm's input. */
  x: F32;
  saved: NormSaved;
}
/** What the MLP's backward reads: its projections' outputs, by their index in the component's projections. */
export type MlpSavedName = number;

/** What a head group keeps for backward (TransformerBlockOptions.keepAttentionOutputs): its attention output and the attention's statistics. */
export interface KeptGroup {
  /** [b, s, H/G, D], as the attention returned it. */
  out: F32;
  kept: KeptAttention;
}

/** Gets and deletes: the map no longer references the value. */
export function take<K, V>(map: Map<K, V>, key: K): V {
  const value = map.get(key);
  if (value === undefined) throw new BlockError(`TransformerBlock.backward: '${String(key)}' was not saved, or was read already`);
  map.delete(key);
  return value;
}

/**
 * Everything the backward pass reads, as the recorder saw it (a forward, a
 * checkpoint recompute, or one MLP tile's recompute). Backward takes each
 * entry out as it reads it.
 */
export class Activations {
  readonly norms = new Map<NormName, NormRecord>();
  /** qkNorm: the per-head norms' inputs ([rows * n, D], q's and k's projections) and statistics. */
  readonly headNorms = new Map<QkNormName, NormRecord>();
  /** The input of each linear layer. */
  readonly inputs = new Map<LinearName, F32>();
  /** The MLP projections' outputs (GELU: up's; SwiGLU: gate's and up's), by index. */
  readonly mlp = new Map<MlpSavedName, F32>();
  attention: BlockAttentionContext | null = null;
  /** attention output [b, s, H, D] (handed back with the attention's context) */
  attentionOut: F32 | null = null;
  /** Head groups with keepAttentionOutputs: each group's output and statistics, in group order (taken by the backward). */
  groups: KeptGroup[] | null = null;
  /** Tiled MLP: its input x2 [rows, hidden] (norm2's input), all the MLP keeps. */
  mlpInput: F32 | null = null;
  /** x2 while it is kept in bf16 (BlockContext.storeInBfloat16); mlpInput is then null. */
  private mlpInputBf16: Tensor<"bfloat16"> | null = null;
  /** Set by backward and release(): the entries are consumed, or being consumed. */
  spent = false;

  takeNorm(name: NormName): NormRecord {
    return take(this.norms, name);
  }

  takeHeadNorm(name: QkNormName): NormRecord {
    return take(this.headNorms, name);
  }

  takeInput(name: LinearName): F32 {
    return take(this.inputs, name);
  }

  takeMlp(name: MlpSavedName): F32 {
    return take(this.mlp, name);
  }

  takeMlpInput(): F32 {
    if (this.mlpInputBf16 !== null) {
      // made again in float32, each element exactly the bf16 value
      const x2 = toDType(this.mlpInputBf16, "float32");
      this.mlpInputBf16 = null;
      return x2;
    }
    const x2 = this.mlpInput;
    if (x2 === null) throw new BlockError("TransformerBlock.backward: the tiled MLP's input was not saved, or was read already");
    this.mlpInput = null;
    return x2;
  }

  /** keepAttentionOutputs: a new, empty list of the head groups' outputs, which the forward fills. */
  keepGroups(): KeptGroup[] {
    this.groups = [];
    return this.groups;
  }

  /** The head groups' kept outputs and statistics (null when none were kept); this no longer holds them. */
  takeGroups(): KeptGroup[] | null {
    const groups = this.groups;
    this.groups = null;
    return groups;
  }

  /** Bytes of the head groups' kept outputs and statistics. */
  get groupBytes(): number {
    return (this.groups ?? []).reduce((n, g) => n + g.out.byteLength + g.kept.savedBytes, 0);
  }

  /**
   * True when a tiled MLP's input is all this holds besides the head groups'
   * kept outputs (if any): the forward of attention in head groups with a tiled MLP.
   */
  get holdsOnlyMlpInput(): boolean {
    const empty = this.norms.size + this.headNorms.size + this.inputs.size + this.mlp.size === 0 && this.attention === null;
    return empty && (this.mlpInput !== null || this.mlpInputBf16 !== null);
  }

  /** Keeps x2 as bf16 (rounded to nearest even); returns the float32 x2 it let go of (the caller may reuse it), or null. */
  storeMlpInputAsBfloat16(): F32 | null {
    const x2 = this.mlpInput;
    if (x2 === null) return null;
    this.mlpInputBf16 = toDType(x2, "bfloat16");
    this.mlpInput = null;
    return x2;
  }

  /** Bytes of x2 while it is kept in bf16, else 0. */
  get mlpInputBf16Bytes(): number {
    return this.mlpInputBf16?.byteLength ?? 0;
  }

  savedAttention(): BlockAttentionContext {
    if (this.attention === null) throw new BlockError("TransformerBlock.backward: the attention's context was not saved, or was released already");
    return this.attention;
  }

  /** Gives the attention's context and output (and `tensors`, which it returned) back to it, and drops them. */
  releaseAttention(attention: BlockAttention, ...tensors: F32[]): void {
    if (this.attention !== null) attention.release(this.attention, this.attentionOut!, ...tensors);
    this.attention = null;
    this.attentionOut = null;
  }

  clear(): void {
    this.norms.clear();
    this.headNorms.clear();
    this.inputs.clear();
    this.mlp.clear();
    this.attention = null;
    this.attentionOut = null;
    this.mlpInput = null;
    this.mlpInputBf16 = null;
    this.groups = null;
  }
}

/** What forward keeps for backward. */
export class BlockContext {
  /** The input in float32, or null while it is kept in bf16 (storeInBfloat16). */
  private inputValues: F32 | null;
  private inputBf16: Tensor<"bfloat16"> | null = null;

  constructor(
    readonly owner: TransformerBlock,
    /** Input [b, s, hidden]. */
    input: F32,
    readonly inputs: Inputs,
    /** Null under activation checkpointing. */
    readonly activations: Activations | null,
  ) {
    this.inputValues = input;
  }

  /**
   * Input [b, s, hidden]. Kept as bf16, it is made again in float32 on first
   * read (the backward's), each element exactly the bf16 value, and kept so.
   */
  get input(): F32 {
    if (this.inputValues === null) {
      this.inputValues = toDType(this.inputBf16!, "float32");
      this.inputBf16 = null;
    }
    return this.inputValues;
  }

  /**
   * Keeps what the context holds as bf16 (rounded to nearest even), half its
   * bytes: under activation checkpointing the input, all it keeps (the
   * backward recomputes the block from the rounded input); with attention in
   * head groups and a tiled MLP, the input and the MLP's input x2, all those
   * keep (the backward recomputes the attention from the rounded input and
   * the MLP tiles from the rounded x2; kept head-group outputs stay float32). Lets go of the float32 tensors: the
   * caller may reuse the input; the float32 x2 is returned for the same, or
   * null. Any other context keeps more than these and is refused.
   */
  storeInBfloat16(): F32 | null {
    const a = this.activations;
    if (a !== null && !a.holdsOnlyMlpInput)
      throw new BlockError(
        "BlockContext.storeInBfloat16: only a context that keeps its input alone (activation checkpointing) or its input and the MLP's input (attention in head groups with a tiled MLP) stores them in bf16",
      );
    if (this.inputValues !== null) {
      this.inputBf16 = toDType(this.inputValues, "bfloat16");
      this.inputValues = null;
    }
    return a === null ? null : a.storeMlpInputAsBfloat16();
  }

  /** Bytes of the tensors this context keeps alive (the input included). */
  get savedBytes(): number {
    const a = this.activations;
    if (this.inputBf16 !== null) return this.inputBf16.byteLength + (a?.mlpInputBf16Bytes ?? 0) + (a?.groupBytes ?? 0);
    if (a === null) return this.input.byteLength;
    const tensors: F32[] = [this.input, ...a.inputs.values(), ...a.mlp.values()];
    for (const { x, saved } of [...a.norms.values(), ...a.headNorms.values()]) tensors.push(x, ...Object.values(saved));
    if (a.mlpInput !== null) tensors.push(a.mlpInput);
    // each buffer once: reshaped views share their data (h1 feeds q, k and v; norm1's input is the block input)
    const buffers = new Set(tensors.map((t) => t.data));
    return [...buffers].reduce((n, d) => n + d.byteLength, 0) + (a.attention?.savedBytes ?? 0) + a.groupBytes;
  }
}

export interface BlockGradients {
  /** [b, s, hidden] */
  dx: F32;
  /** Weight gradients by name (views into `flat`). */
  grads: BlockWeights;
  /** Every weight gradient back to back, in `blockWeightSpecs` order. */
  flat: Float32Array;
}

/** The [b, s] layout of the input and the call's inputs: what the attention half needs. */
export interface Geometry {
  batch: number;
  seq: number;
  call: Inputs;
}

/** Checks the forward options against x [b, s, hidden]. */
export function blockInputs(x: F32, options: BlockForwardOptions): Inputs {
  const positions = options.positions ?? 0;
  const tokens = x.shape[0]! * x.shape[1]!;
  if (typeof positions === "number") {
    if (!Number.isInteger(positions) || positions < 0)
      throw new BlockError(`TransformerBlock.forward: positions must be an integer >= 0 or an Int32Array, got ${positions}`);
  } else if (!(positions instanceof Int32Array) || positions.length !== tokens) {
    throw new BlockError(
      `TransformerBlock.forward: per-token positions must be an Int32Array of b * s = ${tokens} entries, got ${positions?.length ?? typeof positions}`,
    );
  }
  const ids = options.documents;
  const run = options.attentionRun;
  if (ids === undefined) return { positions, documents: undefined, run };
  if (!(ids instanceof Int32Array) || ids.length !== tokens) {
    throw new BlockError(`TransformerBlock.forward: documents must be an Int32Array of b * s = ${tokens} document ids, got ${ids?.length ?? typeof ids}`);
  }
  // queries and keys are the same tokens on one device
  return { positions, documents: { query: ids, key: ids }, run };
}
