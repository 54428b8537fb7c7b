/**
 * Reading a Hugging Face config.json for a model family: typed reads of its
 * keys with Hugging Face's defaults, and refusals of values the library does
 * not implement, every message naming the file and the key. Shared by the
 * families (llama.ts, qwen2.ts, qwen3.ts).
 */
import type { RopeScaling } from "@ulysses/kernels";
import { ModelError } from "../errors.js";
import { ropeScalingFrom } from "./rope-scaling.js";

/** A config.json's object and its file name, read key by key. */
export function configReader(json: Readonly<Record<string, unknown>>, file: string) {
  const where = (key: string) => `config '${file}': ${key}`;
  const shown = (value: unknown) => JSON.stringify(value)?.slice(0, 80) ?? String(value);
  /** A positive integer; `fallback` when the key is absent or null (none: the key is required). */
  const int = (key: string, fallback?: number): number => {
    const value = json[key] ?? fallback;
    if (!Number.isSafeInteger(value) || (value as number) < 1) throw new ModelError(`${where(key)} must be a positive integer, got ${shown(value)}`);
    return value as number;
  };
  /** A positive finite number; `fallback` when absent or null. */
  const number = (key: string, fallback: number): number => {
    const value = json[key] ?? fallback;
    if (typeof value !== "number" || !Number.isFinite(value) || value <= 0)
      throw new ModelError(`${where(key)} must be a positive number, got ${shown(value)}`);
    return value;
  };
  /** true or false; `fallback` when absent or null. */
  const boolean = (key: string, fallback: boolean): boolean => {
    const value = json[key] ?? fallback;
    if (typeof value !== "boolean") throw new ModelError(`${where(key)} must be true or false, got ${shown(value)}`);
    return value;
  };
  /** Refuses the key's value, when present, unless `allowed` accepts it; `why` says what is missing. */
  const refuse = (key: string, allowed: (value: unknown) => boolean, why: string) => {
    if (key in json && !allowed(json[key])) throw new ModelError(`${where(key)} ${shown(json[key])} is not supported: ${why}`);
  };
  /** SwiGLU's silu(gate) x up: hidden_act must be silu (the default of every family here). */
  const siluOnly = () => refuse("hidden_act", (v) => v === "silu", "the MLP is SwiGLU, silu(gate) x up");
  /** Attention dropout is not implemented: a nonzero rate would train differently. */
  const noDropout = () => refuse("attention_dropout", (v) => v === 0 || v === null, "attention dropout is not implemented (training would run without it)");
  return { int, number, boolean, refuse, siluOnly, noDropout, where, shown };
}

export type ConfigReader = ReturnType<typeof configReader>;

/**
 * The per-head width: config.json's head_dim when present (Hugging Face's
 * Llama, Mistral, Qwen2 and Qwen3 honour it), else `fallback` (hidden_size /
 * num_attention_heads for Llama, Mistral and Qwen2; Qwen3's config defaults
 * it to 128). It must be even (RoPE rotates pairs).
 */
export function headDimOf(read: ConfigReader, json: Readonly<Record<string, unknown>>, fallback: () => number): number {
  const headDim = json.head_dim === undefined || json.head_dim === null ? fallback() : read.int("head_dim");
  if (headDim % 2 !== 0) throw new ModelError(`${read.where("head_dim")} ${headDim} is not supported: RoPE needs an even head width`);
  return headDim;
}

/** hidden_size / num_attention_heads, which must divide (the default head width). */
export function evenSplit(read: ConfigReader, hidden: number, heads: number): number {
  if (hidden % heads !== 0)
    throw new ModelError(`${read.where("hidden_size")} ${hidden} is not divisible by num_attention_heads ${heads} (and there is no head_dim)`);
  return hidden / heads;
}

/** tie_word_embeddings (default false in the families here). */
export function tiedOf(read: ConfigReader): boolean {
  return read.boolean("tie_word_embeddings", false);
}

/**
 * RoPE of a decoder config.json: rope_theta (default `fallback`) and
 * rope_scaling (linear, llama3, yarn: rope-scaling.ts; others refused by name), or
 * transformers 5's rope_parameters holding plain RoPE only ({ rope_type:
 * "default", rope_theta }; anything else refused by name, as is rope_scaling
 * beside it). partial_rotary_factor other than 1 is refused.
 */
export function ropeOf(
  read: ConfigReader,
  json: Readonly<Record<string, unknown>>,
  file: string,
  fallback: number,
): { ropeBase: number; ropeScaling?: RopeScaling } {
  read.refuse("partial_rotary_factor", (v) => v === 1 || v === null, "RoPE on part of each head is not implemented (every pair is rotated)");
  const parameters = json.rope_parameters;
  if (parameters === undefined || parameters === null) {
    const ropeScaling = ropeScalingFrom(json, file);
    return { ropeBase: read.number("rope_theta", fallback), ...(ropeScaling === undefined ? {} : { ropeScaling }) };
  }
  read.refuse("rope_scaling", (v) => v === null, "rope_scaling beside rope_parameters is not read (give one of them)");
  const p = (typeof parameters === "object" && !Array.isArray(parameters) ? parameters : {}) as Record<string, unknown>;
  const plain = p === parameters && (p.rope_type ?? "default") === "default" && Object.keys(p).every((k) => k === "rope_type" || k === "rope_theta");
  if (!plain)
    throw new ModelError(
      `${read.where("rope_parameters")} ${read.shown(parameters)} is not supported: only plain RoPE ({ rope_type: "default", rope_theta }) is read from rope_parameters`,
    );
  const theta = p.rope_theta ?? json.rope_theta ?? fallback;
  if (typeof theta !== "number" || !Number.isFinite(theta) || theta <= 0)
    throw new ModelError(`${read.where("rope_parameters.rope_theta")} must be a positive number, got ${read.shown(theta)}`);
  if (json.rope_theta !== undefined && json.rope_theta !== null && json.rope_theta !== theta)
    throw new ModelError(`${read.where("rope_theta")} ${read.shown(json.rope_theta)} contradicts rope_parameters.rope_theta ${read.shown(theta)}`);
  return { ropeBase: theta };
}
