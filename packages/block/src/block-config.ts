/**
 * TransformerBlock configuration: defaults, derived sizes and validation.
 * Checked once, before any weight is allocated or any message is sent.
 */
import { copyRopeScaling, ropeScalingProblem, type RopeScaling } from "@ulysses/kernels";
import { BlockError } from "./errors.js";
import { mlpComponent } from "./mlps.js";
import { normComponent } from "./norms.js";

/** A registered MLP (mlps.ts): the built-ins, or one registered with registerMlp. */
export type MlpKind = "gelu" | "swiglu" | (string & {});
/** A registered norm (norms.ts): the built-ins, or one registered with registerNorm. */
export type NormKind = "layernorm" | "rmsnorm" | (string & {});

export interface BlockConfig {
  hidden: number;
  heads: number;
  /** Key/value heads (grouped-query attention); default `heads`. */
  kvHeads?: number;
  /** default "gelu" */
  mlp?: MlpKind;
  /** MLP width = hidden * mlpRatio (must be an integer); default 4. */
  mlpRatio?: number;
  /** The MLP width itself (a Hugging Face config's intermediate_size); when given, it is used and mlpRatio is ignored. */
  mlpHidden?: number;
  /** default "layernorm" */
  norm?: NormKind;
  /** default 1e-5 */
  eps?: number;
  /** default 10000 */
  ropeBase?: number;
  /** RoPE's frequency scaling (linear, llama3); default none. */
  ropeScaling?: RopeScaling;
  /** default true */
  causal?: boolean;
  /** Biases on every linear layer; default false. */
  bias?: boolean;
}

export interface ResolvedBlockConfig {
  readonly hidden: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly mlp: MlpKind;
  readonly mlpRatio: number;
  readonly mlpHidden: number;
  readonly norm: NormKind;
  readonly eps: number;
  readonly ropeBase: number;
  /** Absent: plain RoPE. */
  readonly ropeScaling?: RopeScaling;
  readonly causal: boolean;
  readonly bias: boolean;
}

function positiveInteger(name: string, value: number): void {
  if (!Number.isInteger(value) || value < 1) throw new BlockError(`block config: ${name} must be a positive integer, got ${value}`);
}

/** Fills in defaults and checks the configuration (throws BlockError naming the values). */
export function resolveBlockConfig(config: BlockConfig): ResolvedBlockConfig {
  const { hidden, heads } = config;
  const kvHeads = config.kvHeads ?? heads;
  positiveInteger("hidden", hidden);
  positiveInteger("heads", heads);
  positiveInteger("kvHeads", kvHeads);
  if (hidden % heads !== 0) throw new BlockError(`block config: hidden (${hidden}) must be divisible by heads (${heads})`);
  if (heads % kvHeads !== 0) throw new BlockError(`block config: heads (${heads}) must be a multiple of kvHeads (${kvHeads})`);
  const headDim = hidden / heads;
  if (headDim % 2 !== 0) throw new BlockError(`block config: headDim = hidden/heads = ${hidden}/${heads} = ${headDim} must be even for RoPE`);
  if (config.mlpHidden !== undefined && (!Number.isSafeInteger(config.mlpHidden) || config.mlpHidden < 1))
    throw new BlockError(`block config: mlpHidden must be a positive integer, got ${String(config.mlpHidden)}`);
  const mlpHidden = config.mlpHidden ?? hidden * (config.mlpRatio ?? 4);
  const mlpRatio = config.mlpHidden === undefined ? (config.mlpRatio ?? 4) : config.mlpHidden / hidden;
  if (!Number.isInteger(mlpHidden) || mlpHidden < 1) {
    throw new BlockError(`block config: hidden * mlpRatio = ${hidden} * ${mlpRatio} = ${mlpHidden} must be a positive integer`);
  }
  const mlp = mlpComponent(config.mlp ?? "gelu").name;
  const norm = normComponent(config.norm ?? "layernorm").name;
  const eps = config.eps ?? 1e-5;
  const ropeBase = config.ropeBase ?? 10000;
  if (!(eps > 0) || !(ropeBase > 0)) throw new BlockError(`block config: eps (${eps}) and ropeBase (${ropeBase}) must be positive`);
  const scalingProblem = ropeScalingProblem(config.ropeScaling);
  if (scalingProblem !== undefined) throw new BlockError(`block config: ${scalingProblem}`);
  return {
    hidden,
    heads,
    kvHeads,
    headDim,
    mlp,
    mlpRatio,
    mlpHidden,
    norm,
    eps,
    ropeBase,
    ...(config.ropeScaling === undefined ? {} : { ropeScaling: copyRopeScaling(config.ropeScaling) }),
    causal: config.causal ?? true,
    bias: config.bias ?? false,
  };
}
