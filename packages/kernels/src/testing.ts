/**
 * @ulysses/kernels/testing: what tests and examples of the kernels and of the
 * packages above them use, apart from the kernels' own API: seeded random
 * tensors, float64 reference implementations of every op (the independent
 * references the tests compare against), finite differences, and
 * PoisoningOps (a BlockOps that poisons what it is told is released).
 */
export { referenceForward64, referenceBackward64, type Forward64, type Gradients64 } from "./reference/attention.js";
export { PoisoningOps } from "./reference/ops.js";
export { toFloat64, toFloat32, type Real, type F64 } from "./reference/float64.js";
export { linearForward64, linearBackward64 } from "./reference/linear.js";
export { layerNormForward64, layerNormBackward64, rmsNormForward64, rmsNormBackward64 } from "./reference/norms.js";
export { geluScalar, geluDerivative, geluForward64, geluBackward64, swigluForward64, swigluBackward64, GELU_C, GELU_K } from "./reference/activations.js";
export { ropeRotate64 } from "./reference/rope.js";
export { embeddingForward64, embeddingBackward64, crossEntropyForward64, crossEntropyBackward64, DEFAULT_IGNORE_INDEX } from "./reference/embedding-loss.js";
export { seededRandom, randomTensor, randomTensor64, maxRelativeError, numericalGradient, dot } from "./reference/testing.js";
