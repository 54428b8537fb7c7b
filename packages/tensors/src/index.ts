/** @ulysses/tensors: plain tensors for every other package. */
export { TensorError } from "./errors.js";
export { DTYPES, bytesPerElement, isDType, allocateStorage, storageOverlaps, type DType, type Storage, type StorageByDType } from "./dtype.js";
export { formatShape, numel, stridesOf, normalizeAxis, type Shape } from "./shape.js";
export { Tensor, type AllocateOptions } from "./tensor.js";
export { permute, permuteInto, permutedShape, narrow, narrowInto, split, chunk, evenSplitSizes, concat, concatInto } from "./layout.js";
// toOrt / fromOrt: the subpath "@ulysses/tensors/ort" (its types are onnxruntime-common's, which need the DOM lib to type-check)
export {
  CONVERTIBLE_DTYPES,
  bfloat16BitsToFloat32,
  float16BitsToFloat32,
  float32BitsToBfloat16Bits,
  float32BitsToFloat16Bits,
  float32ToBfloat16Bits,
  float32ToFloat16Bits,
  toDType,
  toDTypeInto,
  type ConvertibleDType,
} from "./convert.js";
export { Rng, philox4x32, type RngState } from "./random.js";
export { randomNormal, randomUniform, type RandomTensorOptions } from "./random-tensor.js";
