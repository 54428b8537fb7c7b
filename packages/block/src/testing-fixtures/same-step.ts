/**
 * One comparison for the block's mode tests (tiled MLP, checkpointing,
 * attention in head groups): a step's output, input gradient and every weight
 * gradient equal the plain block's within 1e-5 relative, and none of the
 * plain block's is trivially zero (so the comparison cannot pass on zeros).
 */
import { maxRelativeError } from "@ulysses/kernels/testing";
import type { Tensor } from "@ulysses/tensors";
import { expect } from "vitest";
import type { ResolvedBlockConfig } from "../block-config.js";
import { blockWeightSpecs } from "../block-weights.js";

type F32 = Tensor<"float32">;

export interface BlockStep {
  y: F32;
  dx: F32;
  grads: Record<string, F32>;
}

export function expectSameStep(c: ResolvedBlockConfig, got: BlockStep, want: BlockStep): void {
  const pairs: [string, F32, F32][] = [
    ["y", got.y, want.y],
    ["dx", got.dx, want.dx],
  ];
  for (const spec of blockWeightSpecs(c)) pairs.push([spec.name, got.grads[spec.name]!, want.grads[spec.name]!]);
  for (const [name, actual, expected] of pairs) {
    expect(Math.max(...Array.from(expected.data, Math.abs)), `${name} is not trivially zero`).toBeGreaterThan(1e-6);
    expect(maxRelativeError(actual, expected), name).toBeLessThanOrEqual(1e-5);
  }
}
