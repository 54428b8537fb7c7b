/**
 * The per-head RMSNorm of q and k (BlockConfig.qkNorm, as Qwen3 has it): the
 * rmsnorm component run on a [b * s * n, D] view of q or k [b, s, n, D], its
 * gain [D] shared by the n heads, the block's eps. Used by the recorder (the
 * plain block), its backward, and the head groups.
 */
import type { BlockOps } from "@ulysses/kernels";
import type { Tensor } from "@ulysses/tensors";
import type { NormRecord } from "./block-activations.js";
import { normComponent } from "./norms.js";

type F32 = Tensor<"float32">;

/** x [b, s, n, D] -> y [b, s, n, D] (each head's D normalised) and what the backward reads (x as [b * s * n, D], rstd). */
export async function headNormForward(ops: BlockOps, x: F32, gamma: F32, eps: number): Promise<{ y: F32; record: NormRecord }> {
  const [b, s, n, d] = x.shape as unknown as [number, number, number, number];
  // [b, s, n, D] -> [b * s * n, D]
  const flat = x.reshape([b * s * n, d]);
  const { y, saved } = await normComponent("rmsnorm").forward(ops, flat, { gamma }, eps);
  // [b * s * n, D] -> [b, s, n, D]
  return { y: y.reshape([b, s, n, d]), record: { x: flat, saved } };
}

/** dy [b, s, n, D] -> dx [b, s, n, D] (the gradient at the projection's output) and the gain's gradient [D]. */
export async function headNormBackward(ops: BlockOps, record: NormRecord, gamma: F32, dy: F32): Promise<{ dx: F32; dGamma: F32 }> {
  // [b, s, n, D] -> [b * s * n, D] and back
  const r = await normComponent("rmsnorm").backward(ops, record.x, { gamma }, record.saved, dy.reshape(record.x.shape as number[]));
  return { dx: r.dx.reshape(dy.shape as number[]), dGamma: r.grads.gamma! };
}
