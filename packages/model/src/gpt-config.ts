/**
 * The GPT's configuration, its validation, and the list of its parameters
 * (names, shapes, initialisers, weight decay) in the fixed order of the flat
 * parameter vector: token embedding, the blocks' weights (in the block's own
 * spec order), the final norm, the LM head (absent when tied).
 */
import { blockWeightSpecs, resolveBlockConfig, type ResolvedBlockConfig } from "@ulysses/block";
import { ModelError } from "./errors.js";

export interface GptConfig {
  vocab: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  layers: number;
  mlp: "gelu" | "swiglu";
  mlpRatio: number;
  /** Longest sequence the model is used with (checked by forward and export). */
  maxSeq: number;
  /** Use the token embedding (transposed) as the LM head. */
  tiedHead: boolean;
  attention: "ulysses" | "allgather";
  /** Norm of the blocks and the final norm (default layernorm). */
  norm?: "layernorm" | "rmsnorm";
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
    norm: config.norm ?? "layernorm",
    attention: config.attention,
    causal: true,
  });
}

/** Checks the configuration (throws a ModelError naming the values). */
export function validateGptConfig(config: GptConfig): void {
  for (const key of ["vocab", "hidden", "heads", "kvHeads", "layers", "maxSeq"] as const) {
    const value = config[key];
    if (!Number.isInteger(value) || value < 1) throw new ModelError(`GPT config: ${key} must be a positive integer, got ${String(value)}`);
  }
  try {
    blockConfigOf(config);
  } catch (cause) {
    throw new ModelError(`GPT config: ${(cause as Error).message}`, { cause });
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
  specs.push({ name: "norm.gamma", shape: [config.hidden], init: "ones", std: 0, decay: false });
  if (block.norm === "layernorm") specs.push({ name: "norm.beta", shape: [config.hidden], init: "zeros", std: 0, decay: false });
  if (!config.tiedHead) specs.push({ name: "head.w", shape: [config.hidden, config.vocab], init: "normal", std: 0.02, decay: true });
  return specs;
}

/** Total number of parameters. */
export function parameterCount(config: GptConfig): number {
  return gptParamSpecs(config).reduce((n, s) => n + s.shape.reduce((a, b) => a * b, 1), 0);
}
