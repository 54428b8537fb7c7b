/**
 * The package's two entries for two audiences: the root holds the kernels'
 * API; `@ulysses/kernels/testing` the seeded random tensors, float64
 * references, finite differences and PoisoningOps that tests and examples use.
 */
import * as root from "@ulysses/kernels";
import * as testing from "@ulysses/kernels/testing";
import { describe, expect, it } from "vitest";

const TESTING = ["seededRandom", "randomTensor", "numericalGradient", "maxRelativeError", "referenceForward64", "layerNormForward64", "PoisoningOps"];

describe("@ulysses/kernels' entries", () => {
  it("the test helpers are on the testing subpath only", () => {
    for (const name of TESTING) {
      expect(testing, name).toHaveProperty(name);
      expect(root, name).not.toHaveProperty(name);
    }
  });

  it("the root keeps the kernels' API, the one-device reference kernels included", () => {
    for (const name of ["OrtOps", "OrtAttention", "SessionCache", "ReferenceOps", "ReferenceAttention", "createAttention", "registerAttention", "GraphBuilder"])
      expect(root, name).toHaveProperty(name);
  });
});
