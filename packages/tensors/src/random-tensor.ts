/**
 * Random tensors from the seeded generator in `random.ts`: the same (seed,
 * stream, shape) gives the same tensor everywhere. Elements are drawn in
 * row-major order, so a tensor equals the first `size` values of
 * `new Rng(seed, stream).fillUniform(...)` (or fillNormal).
 */
import { TensorError } from "./errors.js";
import { Rng } from "./random.js";
import { validateShape, type Shape } from "./shape.js";
import { Tensor } from "./tensor.js";

export interface RandomTensorOptions {
  /** Seed of a fresh generator; ignored when `rng` is given. */
  seed?: number | bigint;
  /** Stream of a fresh generator (default 0). */
  stream?: number | bigint;
  /** Draw from (and advance) this generator instead of a fresh one. */
  rng?: Rng;
  /** float32 (default) or float64; convert to 16-bit types with toDType. */
  dtype?: "float32" | "float64";
}

function generatorFor(options: RandomTensorOptions, what: string): Rng {
  if (options.rng !== undefined) return options.rng;
  if (options.seed === undefined) throw new TensorError(`${what}: give a seed (or an rng); got options ${JSON.stringify(Object.keys(options))}`);
  return new Rng(options.seed, options.stream ?? 0);
}

function allocate(shape: Shape, options: RandomTensorOptions, what: string): Tensor<"float32" | "float64"> {
  const dtype = options.dtype ?? "float32";
  if (dtype !== "float32" && dtype !== "float64") {
    throw new TensorError(`${what}: dtype ${String(dtype)} is not supported; draw float32 or float64 and convert with toDType`);
  }
  validateShape(shape);
  return new Tensor(dtype, shape);
}

/** A tensor of uniform values in [low, high) (default [0, 1)). */
export function randomUniform(shape: Shape, options: RandomTensorOptions & { low?: number; high?: number }): Tensor<"float32" | "float64"> {
  const out = allocate(shape, options, "randomUniform");
  generatorFor(options, "randomUniform").fillUniform(out.data, options.low ?? 0, options.high ?? 1);
  return out;
}

/** A tensor of normal values (default mean 0, std 1). */
export function randomNormal(shape: Shape, options: RandomTensorOptions & { mean?: number; std?: number }): Tensor<"float32" | "float64"> {
  const out = allocate(shape, options, "randomNormal");
  generatorFor(options, "randomNormal").fillNormal(out.data, options.mean ?? 0, options.std ?? 1);
  return out;
}
