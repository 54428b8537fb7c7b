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
  /** RoPE's frequency scaling (linear, llama3, yarn); default none. */
  ropeScaling?: RopeScaling;
  /** default true */
  causal?: boolean;
  /** Biases on every linear layer (attentionBias "qkvo" and mlpBias true); default false. */
  bias?: boolean;
  /**
   * Biases of the attention projections: "none", "qkv" (q, k and v: Qwen2) or
   * "qkvo" (o too: Llama's attention_bias); default "qkvo" when `bias`, else "none".
   */
  attentionBias?: AttentionBias;
  /** Biases of the MLP's projections (gate, up, down: Llama's mlp_bias); default `bias`. */
  mlpBias?: boolean;
  /** Per-head width of q, k and v (even, for RoPE); default hidden / heads. q is [rows, heads * headDim], attn.o [heads * headDim, hidden]. */
  headDim?: number;
  /**
   * RMSNorm over headDim of every head of q and of k after their projections
   * and before RoPE (Qwen3), weights attn.q_norm.gamma and attn.k_norm.gamma
   * [headDim] shared by the heads, the block's eps; default false.
   */
  qkNorm?: boolean;
}

/** Which attention projections have a bias. */
export type AttentionBias = "none" | "qkv" | "qkvo";
const ATTENTION_BIASES: readonly AttentionBias[] = ["none", "qkv", "qkvo"];

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
  readonly attentionBias: AttentionBias;
  readonly mlpBias: boolean;
  readonly qkNorm: boolean;
}

/** Whether the linear layer `name` (attn.q, ..., mlp.down) has a bias `${name}.b` under this config. */
export function hasBias(config: Pick<ResolvedBlockConfig, "attentionBias" | "mlpBias">, name: string): boolean {
  if (name.startsWith("mlp.")) return config.mlpBias;
  if (name === "attn.o") return config.attentionBias === "qkvo";
  return config.attentionBias !== "none";
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
  if (heads % kvHeads !== 0) throw new BlockError(`block config: heads (${heads}) must be a multiple of kvHeads (${kvHeads})`);
  let headDim: number;
  if (config.headDim === undefined) {
    if (hidden % heads !== 0) throw new BlockError(`block config: hidden (${hidden}) must be divisible by heads (${heads})`);
    headDim = hidden / heads;
    if (headDim % 2 !== 0) throw new BlockError(`block config: headDim = hidden/heads = ${hidden}/${heads} = ${headDim} must be even for RoPE`);
  } else {
    headDim = config.headDim;
    positiveInteger("headDim", headDim);
    if (headDim % 2 !== 0) throw new BlockError(`block config: headDim ${headDim} must be even for RoPE`);
  }
  const { attentionBias, mlpBias, qkNorm } = resolveBiases(config);
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
    attentionBias,
    mlpBias,
    qkNorm,
  };
}

/** The biases and qkNorm, defaulted and checked: `bias: true` may not be combined with options that take biases away. */
function resolveBiases(config: BlockConfig): { attentionBias: AttentionBias; mlpBias: boolean; qkNorm: boolean } {
  for (const key of ["bias", "mlpBias", "qkNorm"] as const) {
    const value = config[key];
    if (value !== undefined && typeof value !== "boolean") throw new BlockError(`block config: ${key} must be true or false, got ${JSON.stringify(value)}`);
  }
  if (config.attentionBias !== undefined && !ATTENTION_BIASES.includes(config.attentionBias))
    throw new BlockError(`block config: attentionBias must be one of ${ATTENTION_BIASES.join(", ")}, got ${JSON.stringify(config.attentionBias)}`);
  const all = config.bias ?? false;
  if (all && ((config.attentionBias ?? "qkvo") !== "qkvo" || config.mlpBias === false))
    throw new BlockError(
      `block config: bias true (a bias on every linear) contradicts attentionBias ${JSON.stringify(config.attentionBias)} / mlpBias ${String(config.mlpBias)}; give those alone`,
    );
  return { attentionBias: config.attentionBias ?? (all ? "qkvo" : "none"), mlpBias: config.mlpBias ?? all, qkNorm: config.qkNorm ?? false };
}
