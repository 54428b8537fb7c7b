/** @ulysses/tensors: plain tensors for every other package. */
export { TensorError } from "./errors.js";
export { DTYPES, bytesPerElement, isDType, allocateStorage, type DType, type Storage, type StorageByDType } from "./dtype.js";
export { formatShape, numel, stridesOf, normalizeAxis, type Shape } from "./shape.js";
export { Tensor, type AllocateOptions } from "./tensor.js";
export { permute, permuteInto, permutedShape, narrow, split, chunk, evenSplitSizes, concat, concatInto } from "./layout.js";
export { toOrt, fromOrt } from "./ort.js";
