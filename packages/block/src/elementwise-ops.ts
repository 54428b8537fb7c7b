/**
 * The elementwise BlockOps a block of a given configuration calls: its
 * norm's (from the norm component), its MLP activation's and RoPE's. A run
 * compares them with the ops its kernels run natively to name, in its header,
 * every one that takes a slower path instead of failing to say so.
 */
import type { BlockOps } from "@ulysses/kernels";
import type { ResolvedBlockConfig } from "./block-config.js";
import { mlpComponent } from "./mlps.js";
import { normComponent } from "./norms.js";

/** The norm, activation and RoPE ops a block of `config` calls, forward and backward. */
export function elementwiseOpsOf(config: ResolvedBlockConfig): (keyof BlockOps)[] {
  return [...normComponent(config.norm).ops, ...mlpComponent(config.mlp).ops, "ropeForward", "ropeBackward"];
}
