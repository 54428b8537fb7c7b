/**
 * The weights of one TransformerBlock (replicated on every rank): their names,
 * shapes and seeded initialisation, and `FlatTensors`, a set of named tensors
 * that are views into one Float32Array so all weight gradients can be summed
 * over the group with a single all-reduce.
 *
 * Linear weights are stored [in, out] (y = x @ w + b).
 */
import { Rng, Tensor } from "@ulysses/tensors";
import type { BlockOps } from "@ulysses/kernels";
import { hasBias, type ResolvedBlockConfig } from "./block-config.js";
import { BlockError } from "./errors.js";
import { mlpComponent } from "./mlps.js";
import { normComponent } from "./norms.js";

type F32 = Tensor<"float32">;

/** Named block tensors (weights, or their gradients), names as in `blockWeightSpecs`. */
export type BlockWeights = Record<string, F32>;

export interface WeightSpec {
  readonly name: string;
  readonly shape: readonly number[];
  /** "ones" (norm gains), "zeros" (biases), "normal" (matrices, std `std`). */
  readonly init: "ones" | "zeros" | "normal";
  readonly std: number;
}

/** The per-head RMSNorms of q and of k (BlockConfig.qkNorm), weights `${name}.gamma`. */
export const QK_NORMS = ["attn.q_norm", "attn.k_norm"] as const;
export type QkNormName = (typeof QK_NORMS)[number];

/** Names, shapes and initialisers of the block's weights, in a fixed order. */
export function blockWeightSpecs(config: ResolvedBlockConfig): WeightSpec[] {
  const { hidden, heads, kvHeads, headDim, mlpHidden } = config;
  const specs: WeightSpec[] = [];
  const std = 0.02;
  const normWeights = normComponent(config.norm).weights;
  const norm = (name: string) => {
    for (const { suffix, init } of normWeights) specs.push({ name: `${name}.${suffix}`, shape: [hidden], init, std: 0 });
  };
  const linear = (name: string, input: number, output: number, scale = 1) => {
    specs.push({ name: `${name}.w`, shape: [input, output], init: "normal", std: std * scale });
    if (hasBias(config, name)) specs.push({ name: `${name}.b`, shape: [output], init: "zeros", std: 0 });
  };
  norm("norm1");
  linear("attn.q", hidden, heads * headDim);
  linear("attn.k", hidden, kvHeads * headDim);
  linear("attn.v", hidden, kvHeads * headDim);
  // per-head q/k RMSNorm gains [headDim], shared by the heads
  if (config.qkNorm) for (const name of QK_NORMS) specs.push({ name: `${name}.gamma`, shape: [headDim], init: "ones", std: 0 });
  linear("attn.o", heads * headDim, hidden);
  norm("norm2");
  for (const projection of mlpComponent(config.mlp).projections) linear(projection, hidden, mlpHidden);
  linear("mlp.down", mlpHidden, hidden);
  return specs;
}

/**
 * Initial weights from a seeded generator: the same (config, seed) gives the
 * same weights on every rank. `perturb` adds noise of that std to gains and
 * biases and `std` overrides the matrices' std (tests use both so every
 * weight has a non-trivial gradient path).
 */
export function initBlockWeights(config: ResolvedBlockConfig, seed: number, options: { perturb?: number; std?: number } = {}): BlockWeights {
  const rng = new Rng(seed);
  const weights: BlockWeights = {};
  const perturb = options.perturb ?? 0;
  for (const spec of blockWeightSpecs(config)) {
    const t = new Tensor("float32", spec.shape);
    if (spec.init === "normal") rng.fillNormal(t.data, 0, options.std ?? spec.std);
    else {
      t.data.fill(spec.init === "ones" ? 1 : 0);
      if (perturb > 0) for (let i = 0; i < t.size; i++) t.data[i] += perturb * rng.normal();
    }
    weights[spec.name] = t;
  }
  return weights;
}

/** Checks that `weights` has every tensor the config needs, with the right shapes. */
export function checkBlockWeights(config: ResolvedBlockConfig, weights: BlockWeights): void {
  for (const spec of blockWeightSpecs(config)) {
    const t = weights[spec.name];
    if (t === undefined) throw new BlockError(`block weights: missing '${spec.name}' [${spec.shape.join(", ")}]`);
    if (t.dtype !== "float32" || t.rank !== spec.shape.length || t.shape.some((d, i) => d !== spec.shape[i])) {
      throw new BlockError(`block weights: '${spec.name}' is ${t} but the config needs float32 [${spec.shape.join(", ")}]`);
    }
  }
}

/** Named tensors laid out back to back in one Float32Array (`flat`), in spec order. */
export class FlatTensors {
  readonly flat: Float32Array;
  readonly tensors: BlockWeights = {};

  constructor(specs: readonly { name: string; shape: readonly number[] }[]) {
    const sizes = specs.map((s) => s.shape.reduce((a, b) => a * b, 1));
    this.flat = new Float32Array(sizes.reduce((a, b) => a + b, 0));
    let offset = 0;
    specs.forEach((spec, i) => {
      this.tensors[spec.name] = new Tensor("float32", spec.shape, this.flat.subarray(offset, offset + sizes[i]!));
      offset += sizes[i]!;
    });
  }

  /**
   * Adds `value` into the named view (the views start at zero: one gradient,
   * or the sum of partial ones such as row tiles'), with `ops`' native
   * addInto when it has one.
   */
  add(name: string, value: F32, ops: Pick<BlockOps, "addInto"> = {}): void {
    const t = this.tensors[name];
    if (t === undefined || t.size !== value.size) throw new BlockError(`FlatTensors: no slot '${name}' of ${value.size} elements`);
    addWith(ops, t, value);
  }
}

/** target += each term with `ops`' native addInto when it has one (the same bits), else addInto. */
export function addWith(ops: Pick<BlockOps, "addInto">, target: Tensor<"float32">, ...terms: Tensor<"float32">[]): Tensor<"float32"> {
  return ops.addInto !== undefined ? ops.addInto(target, ...terms) : addInto(target, ...terms);
}

/** target += each term, elementwise (same sizes); returns target. */
export function addInto(target: Tensor<"float32">, ...terms: Tensor<"float32">[]): Tensor<"float32"> {
  const t = target.data;
  for (const term of terms) {
    const d = term.data;
    for (let i = 0; i < t.length; i++) t[i] += d[i]!;
  }
  return target;
}
