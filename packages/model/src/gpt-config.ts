/**
 * The GPT's configuration, its validation, and the list of its parameters
 * (names, shapes, initialisers, weight decay) in the fixed order of the flat
 * parameter vector: token embedding, the blocks' weights (in the block's own
 * spec order), the final norm, the LM head (absent when tied).
 */
import { blockWeightSpecs, normComponent, resolveBlockConfig, type AttentionBias, type MlpKind, type NormKind, type ResolvedBlockConfig } from "@ulysses/block";
import { ropeScalingProblem, type RopeScaling } from "@ulysses/kernels";
import { ModelError } from "./errors.js";

export interface GptConfig {
  vocab: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  layers: number;
  /** A registered MLP of @ulysses/block (gelu, swiglu, or one registered with registerMlp). */
  mlp: MlpKind;
  mlpRatio: number;
  /** Longest sequence the model is used with (checked by forward and export). */
  maxSeq: number;
  /** Use the token embedding (transposed) as the LM head. */
  tiedHead: boolean;
  /** Norm of the blocks and the final norm (default layernorm). */
  norm?: NormKind;
  /** The MLP width, when it is not hidden x mlpRatio exactly (a Hugging Face config's intermediate_size); mlpRatio is then ignored. */
  mlpHidden?: number;
  /** The norms' epsilon (default 1e-5). */
  eps?: number;
  /** RoPE's base, theta (default 10000). */
  ropeBase?: number;
  /** RoPE's frequency scaling (linear, llama3, yarn: a Hugging Face config's rope_scaling); absent: plain RoPE. */
  ropeScaling?: RopeScaling;
  /** Per-head width of q, k, v (even); default hidden / heads (a Hugging Face config's head_dim). */
  headDim?: number;
  /** Biases of the attention projections: "none" (default), "qkv" (Qwen2) or "qkvo" (Llama's attention_bias). */
  attentionBias?: AttentionBias;
  /** Biases of the MLP projections (Llama's mlp_bias); default false. */
  mlpBias?: boolean;
  /** Per-head RMSNorm of q and k before RoPE (Qwen3); default false. */
  qkNorm?: boolean;
}

export interface ParamSpec {
  readonly name: string;
  readonly shape: readonly number[];
  readonly init: "ones" | "zeros" | "normal";
  readonly std: number;
  /** AdamW weight decay applies (matrices). */
  readonly decay: boolean;
}

/** The block configuration the GPT's layers use. */
export function blockConfigOf(config: GptConfig): ResolvedBlockConfig {
  return resolveBlockConfig({
    hidden: config.hidden,
    heads: config.heads,
    kvHeads: config.kvHeads,
    mlp: config.mlp,
    mlpRatio: config.mlpRatio,
    ...(config.mlpHidden === undefined ? {} : { mlpHidden: config.mlpHidden }),
    ...(config.eps === undefined ? {} : { eps: config.eps }),
    ...(config.ropeBase === undefined ? {} : { ropeBase: config.ropeBase }),
    ...(config.ropeScaling === undefined ? {} : { ropeScaling: config.ropeScaling }),
    ...(config.headDim === undefined ? {} : { headDim: config.headDim }),
    ...(config.attentionBias === undefined ? {} : { attentionBias: config.attentionBias }),
    ...(config.mlpBias === undefined ? {} : { mlpBias: config.mlpBias }),
    ...(config.qkNorm === undefined ? {} : { qkNorm: config.qkNorm }),
    norm: config.norm ?? "layernorm",
    causal: true,
  });
}

/**
 * Upper bounds of a GPT config. They are far above anything this CPU trainer
 * runs (and above common large models: 128 layers, hidden 16384, 256K vocab)
 * but keep a config from a file (a checkpoint's metadata) from describing a
 * parameter list or a vector no process could hold: a config is checked
 * against them before anything is allocated for it.
 */
export const GPT_CONFIG_LIMITS = {
  vocab: 1 << 24,
  hidden: 1 << 16,
  heads: 1 << 12,
  kvHeads: 1 << 12,
  layers: 1 << 12,
  maxSeq: 1 << 24,
  mlpRatio: 64,
  /** Per-head width (GptConfig.headDim). */
  headDim: 1 << 12,
  /** maxSeq x headDim: the RoPE tables the ONNX export builds (cos and sin, 1 GiB each at the limit). */
  ropeTable: 1 << 28,
  /** Parameters in all (the flat vector is one Float32Array; 2^31 of them are 8 GiB, and the gradient and two moments as much again each). */
  parameters: 2 ** 31 - 1,
} as const;

/** Checks the configuration (throws a ModelError naming the values). */
export function validateGptConfig(config: GptConfig): void {
  if (config === null || typeof config !== "object" || Array.isArray(config))
    throw new ModelError(`GPT config must be an object, got ${JSON.stringify(config)}`);
  for (const key of ["vocab", "hidden", "heads", "kvHeads", "layers", "maxSeq"] as const) {
    const value = config[key];
    if (!Number.isInteger(value) || value < 1) throw new ModelError(`GPT config: ${key} must be a positive integer, got ${String(value)}`);
    if (value > GPT_CONFIG_LIMITS[key]) throw new ModelError(`GPT config: ${key} ${value} is above the limit of ${GPT_CONFIG_LIMITS[key]}`);
  }
  if (typeof config.mlpRatio !== "number" || !(config.mlpRatio > 0) || config.mlpRatio > GPT_CONFIG_LIMITS.mlpRatio) {
    throw new ModelError(`GPT config: mlpRatio must be a number in (0, ${GPT_CONFIG_LIMITS.mlpRatio}], got ${String(config.mlpRatio)}`);
  }
  if (typeof config.tiedHead !== "boolean") throw new ModelError(`GPT config: tiedHead must be true or false, got ${JSON.stringify(config.tiedHead)}`);
  const { mlpHidden, eps, ropeBase } = config;
  if (mlpHidden !== undefined && (!Number.isSafeInteger(mlpHidden) || mlpHidden < 1 || mlpHidden > GPT_CONFIG_LIMITS.mlpRatio * config.hidden))
    throw new ModelError(`GPT config: mlpHidden must be an integer from 1 to ${GPT_CONFIG_LIMITS.mlpRatio} x hidden, got ${String(mlpHidden)}`);
  if (eps !== undefined && !(typeof eps === "number" && eps > 0 && eps <= 1))
    throw new ModelError(`GPT config: eps must be a number in (0, 1], got ${String(eps)}`);
  if (ropeBase !== undefined && !(typeof ropeBase === "number" && ropeBase > 1 && ropeBase <= 1e12))
    throw new ModelError(`GPT config: ropeBase must be a number in (1, 1e12], got ${String(ropeBase)}`);
  // strict (a checkpoint's metadata is read back through here): a known type, exactly its fields, each in range
  const scalingProblem = ropeScalingProblem(config.ropeScaling);
  if (scalingProblem !== undefined) throw new ModelError(`GPT config: ${scalingProblem}`);
  validateAttentionOptions(config);
  let block: ResolvedBlockConfig;
  try {
    block = blockConfigOf(config);
  } catch (cause) {
    throw new ModelError(`GPT config: ${(cause as Error).message}`, { cause });
  }
  if (config.maxSeq * block.headDim > GPT_CONFIG_LIMITS.ropeTable) {
    throw new ModelError(
      `GPT config: maxSeq ${config.maxSeq} x head dim ${block.headDim} = ${config.maxSeq * block.headDim} is above the limit of ${GPT_CONFIG_LIMITS.ropeTable} (the RoPE tables)`,
    );
  }
  const perLayer = blockWeightSpecs(block).reduce((n, s) => n + s.shape.reduce((a, b) => a * b, 1), 0);
  const total = config.vocab * config.hidden * (config.tiedHead ? 1 : 2) + config.layers * perLayer + 2 * config.hidden;
  if (total > GPT_CONFIG_LIMITS.parameters) {
    throw new ModelError(
      `GPT config: ${config.layers} layers x hidden ${config.hidden}, vocab ${config.vocab} make about ${total.toExponential(3)} parameters, ` +
        `above the limit of ${GPT_CONFIG_LIMITS.parameters}`,
    );
  }
}

/** The optional attention fields (headDim, attentionBias, mlpBias, qkNorm), strictly: a config from a file is data. */
function validateAttentionOptions(config: GptConfig): void {
  const { headDim, attentionBias, mlpBias, qkNorm } = config;
  if (headDim !== undefined && (!Number.isSafeInteger(headDim) || headDim < 2 || headDim % 2 !== 0 || headDim > GPT_CONFIG_LIMITS.headDim))
    throw new ModelError(`GPT config: headDim must be an even integer from 2 to ${GPT_CONFIG_LIMITS.headDim}, got ${JSON.stringify(headDim)}`);
  if (attentionBias !== undefined && !(["none", "qkv", "qkvo"] as unknown[]).includes(attentionBias))
    throw new ModelError(`GPT config: attentionBias must be "none", "qkv" or "qkvo", got ${JSON.stringify(attentionBias)}`);
  for (const [key, value] of [
    ["mlpBias", mlpBias],
    ["qkNorm", qkNorm],
  ] as const) {
    if (value !== undefined && typeof value !== "boolean") throw new ModelError(`GPT config: ${key} must be true or false, got ${JSON.stringify(value)}`);
  }
}

/** Parameters in flat-vector order. */
export function gptParamSpecs(config: GptConfig): ParamSpec[] {
  validateGptConfig(config);
  const block = blockConfigOf(config);
  const specs: ParamSpec[] = [{ name: "embed.weight", shape: [config.vocab, config.hidden], init: "normal", std: 0.02, decay: true }];
  for (let layer = 0; layer < config.layers; layer++) {
    for (const spec of blockWeightSpecs(block)) {
      specs.push({ name: `blocks.${layer}.${spec.name}`, shape: spec.shape, init: spec.init, std: spec.std, decay: spec.shape.length === 2 });
    }
  }
  for (const { suffix, init } of normComponent(block.norm).weights) specs.push({ name: `norm.${suffix}`, shape: [config.hidden], init, std: 0, decay: false });
  if (!config.tiedHead) specs.push({ name: "head.w", shape: [config.hidden, config.vocab], init: "normal", std: 0.02, decay: true });
  return specs;
}

/** Total number of parameters. */
export function parameterCount(config: GptConfig): number {
  return gptParamSpecs(config).reduce((n, s) => n + s.shape.reduce((a, b) => a * b, 1), 0);
}
