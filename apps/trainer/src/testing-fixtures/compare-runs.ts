/**
 * For the trainer's equivalence tests: two runs' per-step losses and final
 * checkpoint tensors compared within a relative tolerance (each tensor's
 * largest difference over its largest magnitude). No trainer logic lives here.
 */
import type { Tensor } from "@ulysses/tensors";
import { expect } from "vitest";

export interface RunOutcome {
  losses: number[];
  /** The final checkpoint's tensors by name (weights, and AdamW moments under "optimizer..."). */
  weights: Map<string, Tensor>;
}

/** Losses and weights of `b` within `tolerance` of `a`'s; with `optimizer`, the AdamW moments too. `what` names the run in messages. */
export function expectRunsClose(a: RunOutcome, b: RunOutcome, options: { tolerance: number; optimizer?: boolean; what?: string }): void {
  const what = options.what === undefined ? "" : `${options.what}: `;
  a.losses.forEach((loss, step) => expect(Math.abs(b.losses[step]! - loss) / loss, `${what}step ${step}`).toBeLessThanOrEqual(options.tolerance));
  expect([...b.weights.keys()].sort()).toEqual([...a.weights.keys()].sort());
  for (const [name, t] of a.weights) {
    if (name.startsWith("optimizer") && options.optimizer !== true) continue;
    const other = b.weights.get(name)!.data as Float32Array;
    let worst = 0;
    let scale = 1e-12;
    (t.data as Float32Array).forEach((v, i) => {
      worst = Math.max(worst, Math.abs(v - other[i]!));
      scale = Math.max(scale, Math.abs(v));
    });
    expect(worst / scale, `${what}${name}`).toBeLessThanOrEqual(options.tolerance);
  }
}
