/**
 * A Hugging Face config.json's `rope_scaling` -> the model's RopeScaling
 * (@ulysses/kernels, where the frequencies are computed). Read: absent or
 * null (plain RoPE), type "default" (plain RoPE, no other key), "linear"
 * (factor), "llama3" (factor, low_freq_factor, high_freq_factor,
 * original_max_position_embeddings) and "yarn" (factor; optional
 * original_max_position_embeddings, else the config's
 * max_position_embeddings; beta_fast 32 and beta_slow 1 unless given;
 * attention_factor, else 0.1 ln(factor) + 1 for a factor over 1 and 1
 * otherwise; truncate, default true). yarn's factor is taken as written, with
 * the correction range over original_max_position_embeddings, as vLLM and
 * transformers since its fix for issue 38224 read it (the releases before
 * that fix replaced the factor by max_position_embeddings /
 * original_max_position_embeddings whenever the latter was given). The type under `rope_type` or the older
 * `type` (both: they must agree). Refused by name, with the file and key:
 * yarn's DeepSeek keys mscale and mscale_all_dim, "dynamic" (its frequencies
 * change with the sequence length), "longrope", any other type, a missing or
 * malformed field and any key the type does not have. (transformers 5's
 * rope_parameters: config-reader.ts's ropeOf, which calls this without it.)
 */
import { ropeScalingProblem, type RopeScaling } from "@ulysses/kernels";
import { ModelError } from "../errors.js";

/** Why each known but unimplemented type is refused. */
const REFUSED: Record<string, string> = {
  dynamic: "dynamic NTK scaling changes the frequencies with each sequence's length; it is not implemented",
  longrope: "LongRoPE (per-frequency short and long factors) is not implemented",
};

/** The keys each read type may have, besides rope_type and type. */
const KEYS: Record<string, readonly string[]> = {
  default: [],
  linear: ["factor"],
  llama3: ["factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"],
  yarn: ["factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor", "truncate"],
};

/** yarn keys of other models' variants, refused with the reason. */
const YARN_REFUSED: Record<string, string> = {
  mscale: "DeepSeek's YaRN variant (mscale and mscale_all_dim change the attention factor) is not implemented",
  mscale_all_dim: "DeepSeek's YaRN variant (mscale and mscale_all_dim change the attention factor) is not implemented",
};

function shown(value: unknown): string {
  return JSON.stringify(value)?.slice(0, 80) ?? String(value);
}

/** config.json's `rope_scaling` (in `json`, read from `file`) as a RopeScaling, undefined for plain RoPE; a ModelError naming file and key otherwise. */
export function ropeScalingFrom(json: Readonly<Record<string, unknown>>, file: string): RopeScaling | undefined {
  const where = (key: string) => `config '${file}': ${key}`;
  const scaling = json.rope_scaling;
  if (scaling === undefined || scaling === null) return undefined;
  if (typeof scaling !== "object" || Array.isArray(scaling)) throw new ModelError(`${where("rope_scaling")} must be an object or null, got ${shown(scaling)}`);
  const record = scaling as Record<string, unknown>;
  const typeKey = "rope_type" in record ? "rope_type" : "type";
  const type = record[typeKey];
  if ("rope_type" in record && "type" in record && record.type !== type)
    throw new ModelError(`${where("rope_scaling.type")} ${shown(record.type)} disagrees with rope_scaling.rope_type ${shown(type)}`);
  if (typeof type !== "string") throw new ModelError(`${where(`rope_scaling.${typeKey}`)} must be a string, got ${shown(type)}`);
  if (Object.hasOwn(REFUSED, type)) throw new ModelError(`${where(`rope_scaling.${typeKey}`)} "${type}" is not supported: ${REFUSED[type]}`);
  const keys = Object.hasOwn(KEYS, type) ? KEYS[type] : undefined;
  if (keys === undefined)
    throw new ModelError(`${where(`rope_scaling.${typeKey}`)} ${shown(type)} is not supported: the RoPE scalings read are ${Object.keys(KEYS).join(", ")}`);
  if (type === "yarn") {
    const variant = Object.keys(record).find((key) => Object.hasOwn(YARN_REFUSED, key));
    if (variant !== undefined) throw new ModelError(`${where(`rope_scaling.${variant}`)} is not supported: ${YARN_REFUSED[variant]}`);
  }
  const extra = Object.keys(record).find((key) => key !== "rope_type" && key !== "type" && !keys.includes(key));
  if (extra !== undefined)
    throw new ModelError(`${where(`rope_scaling.${extra}`)} is not a key of a ${type} RoPE scaling (its keys: ${[typeKey, ...keys].join(", ")})`);
  const positive = (key: string): number => {
    const value = record[key];
    if (typeof value !== "number" || !Number.isFinite(value) || value <= 0)
      throw new ModelError(`${where(`rope_scaling.${key}`)} must be a number > 0, got ${key in record ? shown(value) : "nothing (the key is missing)"}`);
    return value;
  };
  const optional = (key: string, fallback: number): number => (record[key] === undefined || record[key] === null ? fallback : positive(key));
  const context = (key: string, value: number): number => {
    if (!Number.isSafeInteger(value) || value < 1 || value > 2 ** 31) throw new ModelError(`${where(key)} must be an integer from 1 to 2^31, got ${value}`);
    return value;
  };
  let result: RopeScaling | undefined;
  if (type === "linear") result = { type: "linear", factor: positive("factor") };
  else if (type === "llama3") {
    const factor = positive("factor");
    const lowFreqFactor = positive("low_freq_factor");
    const highFreqFactor = positive("high_freq_factor");
    const originalMaxPositions = context("rope_scaling.original_max_position_embeddings", positive("original_max_position_embeddings"));
    if (!(highFreqFactor > lowFreqFactor))
      throw new ModelError(`${where("rope_scaling.high_freq_factor")} ${highFreqFactor} must be greater than rope_scaling.low_freq_factor ${lowFreqFactor}`);
    result = { type: "llama3", factor, lowFreqFactor, highFreqFactor, originalMaxPositions };
  } else if (type === "yarn") {
    const factor = positive("factor");
    let originalMaxPositions: number;
    if (record.original_max_position_embeddings !== undefined && record.original_max_position_embeddings !== null)
      originalMaxPositions = context("rope_scaling.original_max_position_embeddings", positive("original_max_position_embeddings"));
    else {
      const max = json.max_position_embeddings;
      if (typeof max !== "number")
        throw new ModelError(
          `${where("rope_scaling.original_max_position_embeddings")} is missing, and so is max_position_embeddings, which yarn's correction range then reads`,
        );
      originalMaxPositions = context("max_position_embeddings", max);
    }
    const betaFast = optional("beta_fast", 32);
    const betaSlow = optional("beta_slow", 1);
    if (!(betaFast > betaSlow)) throw new ModelError(`${where("rope_scaling.beta_fast")} ${betaFast} must be greater than rope_scaling.beta_slow ${betaSlow}`);
    const attentionFactor = optional("attention_factor", factor > 1 ? 0.1 * Math.log(factor) + 1 : 1);
    const truncate = record.truncate ?? true;
    if (typeof truncate !== "boolean") throw new ModelError(`${where("rope_scaling.truncate")} must be true or false, got ${shown(truncate)}`);
    result = { type: "yarn", factor, originalMaxPositions, betaFast, betaSlow, attentionFactor, truncate };
  }
  // the kernels' own check, as a safety net: every bound it has is refused above under the file's keys
  const problem = ropeScalingProblem(result);
  if (problem !== undefined) throw new ModelError(`${where("rope_scaling")} is not supported: ${problem}`);
  return result;
}
