/**
 * RoPE's frequencies, in one place for the training tables, the float64
 * reference and the ONNX export: pair (i, i + d/2) turns by
 * position * inv_freq[i], inv_freq[i] = base^(-2i/d), changed by the
 * scalings long-context checkpoints declare (Hugging Face's rope_scaling):
 * - linear: every inv_freq divided by `factor` (positions interpolated);
 * - llama3 (Llama 3.1): with wavelength 2 pi / inv_freq and the original
 *   context L, high frequencies (wavelength < L / highFreqFactor) are kept,
 *   low ones (wavelength > L / lowFreqFactor) divided by `factor`, and the
 *   band between interpolated: smooth = (L / wavelength - low) / (high - low),
 *   inv_freq' = (1 - smooth) inv_freq / factor + smooth inv_freq;
 * - yarn (YaRN, Peng et al. 2023; Qwen2.5's and Qwen3's long contexts): over
 *   the original context L, pair i's "correction dimension" for r rotations
 *   is d ln(L / (2 pi r)) / (2 ln base); low is betaFast's (floored) and high
 *   betaSlow's (ceiled; neither rounded when truncate is false), clamped to
 *   [0, d - 1]; ramp_i = clamp((i - low) / (high - low), 0, 1) and
 *   inv_freq' = ramp_i inv_freq / factor + (1 - ramp_i) inv_freq: the fast
 *   pairs kept, the slow ones interpolated. It also multiplies cos and sin by
 *   its attention factor (ropeAttentionFactor), which scales q.k by its square.
 */

/** A RoPE scaling: `linear`, Llama 3.1's `llama3` or `yarn` (fields as Hugging Face's rope_scaling names them, in camel case). */
export type RopeScaling =
  | { readonly type: "linear"; readonly factor: number }
  | {
      readonly type: "llama3";
      readonly factor: number;
      readonly lowFreqFactor: number;
      readonly highFreqFactor: number;
      /** original_max_position_embeddings: the context the model was pre-trained with. */
      readonly originalMaxPositions: number;
    }
  | {
      readonly type: "yarn";
      readonly factor: number;
      /** The context the correction range is computed over: the pre-trained one (original_max_position_embeddings). */
      readonly originalMaxPositions: number;
      /** Rotations over the original context that bound the pairs kept (beta_fast, 32 in the paper) ... */
      readonly betaFast: number;
      /** ... and the pairs interpolated (beta_slow, 1 in the paper). */
      readonly betaSlow: number;
      /** What cos and sin are multiplied by (attention_factor; 0.1 ln(factor) + 1 in the paper). */
      readonly attentionFactor: number;
      /** Whether the correction range's ends are rounded to whole pairs (floor, ceil). */
      readonly truncate: boolean;
    };

/** The scaling types RopeScaling describes. */
export const ROPE_SCALING_TYPES: readonly string[] = ["linear", "llama3", "yarn"];

const FIELDS: Record<string, readonly string[]> = {
  linear: ["type", "factor"],
  llama3: ["type", "factor", "lowFreqFactor", "highFreqFactor", "originalMaxPositions"],
  yarn: ["type", "factor", "originalMaxPositions", "betaFast", "betaSlow", "attentionFactor", "truncate"],
};

/** Largest original context accepted (2^31: far above any released model, and keeps L / wavelength finite and exact). */
const MAX_ORIGINAL_POSITIONS = 2 ** 31;

function shown(value: unknown): string {
  return JSON.stringify(value)?.slice(0, 80) ?? String(value);
}

/**
 * What is wrong with `scaling` as a RopeScaling, each field named `${name}.field`, or undefined when it is one (undefined
 * included: no scaling). Strict, as for a config read back from a file: a plain object, a known type, exactly its fields,
 * every number finite; factors > 0, highFreqFactor > lowFreqFactor, originalMaxPositions an integer in [1, 2^31].
 */
export function ropeScalingProblem(scaling: unknown, name = "ropeScaling"): string | undefined {
  if (scaling === undefined) return undefined;
  if (scaling === null || typeof scaling !== "object" || Array.isArray(scaling)) return `${name} must be an object or absent, got ${shown(scaling)}`;
  const record = scaling as Record<string, unknown>;
  const fields = typeof record.type === "string" && Object.hasOwn(FIELDS, record.type) ? FIELDS[record.type] : undefined;
  if (fields === undefined) return `${name}.type must be one of ${ROPE_SCALING_TYPES.map((t) => `"${t}"`).join(", ")}, got ${shown(record.type)}`;
  const extra = Object.keys(record).find((key) => !fields.includes(key));
  if (extra !== undefined) return `${name}.${extra} is not a field of a ${record.type} RoPE scaling (fields: ${fields.join(", ")})`;
  for (const field of fields.slice(1)) {
    const value = record[field];
    if (field === "truncate") {
      if (typeof value !== "boolean") return `${name}.truncate must be true or false, got ${shown(value)}`;
    } else if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) return `${name}.${field} must be a finite number > 0, got ${shown(value)}`;
  }
  if (record.type === "llama3") {
    const { lowFreqFactor, highFreqFactor } = record as Record<string, number>;
    if (!(highFreqFactor! > lowFreqFactor!)) return `${name}.highFreqFactor (${highFreqFactor}) must be greater than ${name}.lowFreqFactor (${lowFreqFactor})`;
  }
  if (record.type === "yarn") {
    const { betaFast, betaSlow } = record as Record<string, number>;
    if (!(betaFast! > betaSlow!)) return `${name}.betaFast (${betaFast}) must be greater than ${name}.betaSlow (${betaSlow})`;
  }
  if (record.type === "llama3" || record.type === "yarn") {
    const { originalMaxPositions } = record as Record<string, number>;
    if (!Number.isSafeInteger(originalMaxPositions) || originalMaxPositions! > MAX_ORIGINAL_POSITIONS)
      return `${name}.originalMaxPositions must be an integer from 1 to ${MAX_ORIGINAL_POSITIONS}, got ${originalMaxPositions}`;
  }
  return undefined;
}

/** A copy of a valid `scaling` with only its own fields (callers check ropeScalingProblem first). */
export function copyRopeScaling(scaling: RopeScaling): RopeScaling {
  if (scaling.type === "linear") return Object.freeze({ type: "linear", factor: scaling.factor });
  if (scaling.type === "yarn") {
    const { factor, originalMaxPositions, betaFast, betaSlow, attentionFactor, truncate } = scaling;
    return Object.freeze({ type: "yarn", factor, originalMaxPositions, betaFast, betaSlow, attentionFactor, truncate });
  }
  const { factor, lowFreqFactor, highFreqFactor, originalMaxPositions } = scaling;
  return Object.freeze({ type: "llama3", factor, lowFreqFactor, highFreqFactor, originalMaxPositions });
}

/** A string that differs whenever the tables do (cache keys): "none", "linear 2", "llama3 8 1 4 8192", "yarn 4 32768 32 1 1.1386 true". */
export function ropeScalingKey(scaling?: RopeScaling): string {
  if (scaling === undefined) return "none";
  if (scaling.type === "linear") return `linear ${scaling.factor}`;
  if (scaling.type === "yarn")
    return `yarn ${scaling.factor} ${scaling.originalMaxPositions} ${scaling.betaFast} ${scaling.betaSlow} ${scaling.attentionFactor} ${scaling.truncate}`;
  return `llama3 ${scaling.factor} ${scaling.lowFreqFactor} ${scaling.highFreqFactor} ${scaling.originalMaxPositions}`;
}

/** What cos and sin are multiplied by: yarn's attention factor, 1 for every other scaling and for none. */
export function ropeAttentionFactor(scaling?: RopeScaling): number {
  return scaling?.type === "yarn" ? scaling.attentionFactor : 1;
}

/** YaRN's ramp over the pairs: 0 for a pair kept (fast), 1 for one interpolated (slow), linear between (see the top of the file). */
function yarnRamp(i: number, headDim: number, base: number, scaling: Extract<RopeScaling, { type: "yarn" }>): number {
  const correction = (rotations: number) => (headDim * Math.log(scaling.originalMaxPositions / (rotations * 2 * Math.PI))) / (2 * Math.log(base));
  let low = correction(scaling.betaFast);
  let high = correction(scaling.betaSlow);
  if (scaling.truncate) {
    low = Math.floor(low);
    high = Math.ceil(high);
  }
  low = Math.max(low, 0);
  high = Math.min(high, headDim - 1);
  // a range of one point would divide by zero: widened by a thousandth, as the paper's code does
  if (low === high) high += 0.001;
  return Math.min(1, Math.max(0, (i - low) / (high - low)));
}

/** inv_freq of pair `i` (0 <= i < headDim / 2) for head dimension `headDim`, RoPE base `base` and an optional scaling. */
export function ropeInverseFrequency(i: number, headDim: number, base: number, scaling?: RopeScaling): number {
  const plain = base ** ((-2 * i) / headDim);
  if (scaling === undefined) return plain;
  if (scaling.type === "linear") return plain / scaling.factor;
  if (scaling.type === "yarn") {
    const ramp = yarnRamp(i, headDim, base, scaling);
    return (ramp * plain) / scaling.factor + (1 - ramp) * plain;
  }
  const { factor, lowFreqFactor: low, highFreqFactor: high, originalMaxPositions: context } = scaling;
  const wavelength = (2 * Math.PI) / plain;
  if (wavelength < context / high) return plain;
  if (wavelength > context / low) return plain / factor;
  const smooth = (context / wavelength - low) / (high - low);
  return ((1 - smooth) * plain) / factor + smooth * plain;
}

/**
 * The cos and sin tables RoPE reads: a row [headDim] per position, pair i's
 * cos (sin) of position * inv_freq[i] at i and at i + headDim / 2, times the
 * scaling's attention factor (yarn's; 1 otherwise). The one place they are
 * filled: OrtOps' tables (which FusedOps reads too) and the ONNX export.
 */
export function ropeTables(positions: ArrayLike<number>, headDim: number, base: number, scaling?: RopeScaling): { cos: Float32Array; sin: Float32Array } {
  const half = headDim / 2;
  const frequencies = ropeInverseFrequencies(headDim, base, scaling);
  const m = ropeAttentionFactor(scaling);
  const cos = new Float32Array(positions.length * headDim);
  const sin = new Float32Array(positions.length * headDim);
  for (let r = 0; r < positions.length; r++) {
    const o = r * headDim;
    for (let i = 0; i < half; i++) {
      const angle = positions[r]! * frequencies[i]!;
      cos[o + i] = cos[o + i + half] = m * Math.cos(angle);
      sin[o + i] = sin[o + i + half] = m * Math.sin(angle);
    }
  }
  return { cos, sin };
}

/** inv_freq [headDim / 2] of every pair (see ropeInverseFrequency). */
export function ropeInverseFrequencies(headDim: number, base: number, scaling?: RopeScaling): Float64Array {
  const frequencies = new Float64Array(Math.floor(headDim / 2));
  for (let i = 0; i < frequencies.length; i++) frequencies[i] = ropeInverseFrequency(i, headDim, base, scaling);
  return frequencies;
}
