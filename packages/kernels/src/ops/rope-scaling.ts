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
 *   inv_freq' = (1 - smooth) inv_freq / factor + smooth inv_freq.
 * Neither changes the magnitude of cos and sin (yarn would; it is not here).
 */

/** A RoPE scaling: `linear` or Llama 3.1's `llama3` (fields as Hugging Face's rope_scaling names them, in camel case). */
export type RopeScaling =
  | { readonly type: "linear"; readonly factor: number }
  | {
      readonly type: "llama3";
      readonly factor: number;
      readonly lowFreqFactor: number;
      readonly highFreqFactor: number;
      /** original_max_position_embeddings: the context the model was pre-trained with. */
      readonly originalMaxPositions: number;
    };

/** The scaling types RopeScaling describes. */
export const ROPE_SCALING_TYPES: readonly string[] = ["linear", "llama3"];

const FIELDS: Record<string, readonly string[]> = {
  linear: ["type", "factor"],
  llama3: ["type", "factor", "lowFreqFactor", "highFreqFactor", "originalMaxPositions"],
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
    if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) return `${name}.${field} must be a finite number > 0, got ${shown(value)}`;
  }
  if (record.type === "llama3") {
    const { lowFreqFactor, highFreqFactor, originalMaxPositions } = record as Record<string, number>;
    if (!(highFreqFactor! > lowFreqFactor!)) return `${name}.highFreqFactor (${highFreqFactor}) must be greater than ${name}.lowFreqFactor (${lowFreqFactor})`;
    if (!Number.isSafeInteger(originalMaxPositions) || originalMaxPositions! > MAX_ORIGINAL_POSITIONS)
      return `${name}.originalMaxPositions must be an integer from 1 to ${MAX_ORIGINAL_POSITIONS}, got ${originalMaxPositions}`;
  }
  return undefined;
}

/** A copy of a valid `scaling` with only its own fields (callers check ropeScalingProblem first). */
export function copyRopeScaling(scaling: RopeScaling): RopeScaling {
  if (scaling.type === "linear") return Object.freeze({ type: "linear", factor: scaling.factor });
  const { factor, lowFreqFactor, highFreqFactor, originalMaxPositions } = scaling;
  return Object.freeze({ type: "llama3", factor, lowFreqFactor, highFreqFactor, originalMaxPositions });
}

/** A string that differs whenever the frequencies do (table cache keys): "none", "linear 2", "llama3 8 1 4 8192". */
export function ropeScalingKey(scaling?: RopeScaling): string {
  if (scaling === undefined) return "none";
  if (scaling.type === "linear") return `linear ${scaling.factor}`;
  return `llama3 ${scaling.factor} ${scaling.lowFreqFactor} ${scaling.highFreqFactor} ${scaling.originalMaxPositions}`;
}

/** inv_freq of pair `i` (0 <= i < headDim / 2) for head dimension `headDim`, RoPE base `base` and an optional scaling. */
export function ropeInverseFrequency(i: number, headDim: number, base: number, scaling?: RopeScaling): number {
  const plain = base ** ((-2 * i) / headDim);
  if (scaling === undefined) return plain;
  if (scaling.type === "linear") return plain / scaling.factor;
  const { factor, lowFreqFactor: low, highFreqFactor: high, originalMaxPositions: context } = scaling;
  const wavelength = (2 * Math.PI) / plain;
  if (wavelength < context / high) return plain;
  if (wavelength > context / low) return plain / factor;
  const smooth = (context / wavelength - low) / (high - low);
  return ((1 - smooth) * plain) / factor + smooth * plain;
}

/** inv_freq [headDim / 2] of every pair (see ropeInverseFrequency). */
export function ropeInverseFrequencies(headDim: number, base: number, scaling?: RopeScaling): Float64Array {
  const frequencies = new Float64Array(Math.floor(headDim / 2));
  for (let i = 0; i < frequencies.length; i++) frequencies[i] = ropeInverseFrequency(i, headDim, base, scaling);
  return frequencies;
}
