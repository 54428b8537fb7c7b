/**
 * Registers FusedAttention as attention implementation "fused" in
 * @ulysses/kernels' registry, so `createAttention({ implementation: "fused" })`
 * works in every process once this package has been imported (the index
 * calls it on import). Importing twice (source and build copies) is harmless.
 * The factory takes the thread count createAttention resolved (the cache's
 * intraOpThreads when a cache is given) and the cache's garbage collector; it
 * throws FusedAttentionError, saying
 * how to build the addon, when the addon is not built.
 */
import { attentionImplementations, registerAttention } from "@ulysses/kernels";
import { FusedAttention } from "./fused-attention.js";

export const FUSED_ATTENTION_NAME = "fused";

/** Registers attention implementation "fused" unless one of that name exists already. */
export function registerFusedAttention(): void {
  if (attentionImplementations().includes(FUSED_ATTENTION_NAME)) return;
  // outputs counted by the cache's collector (when it has one), like the cache's own ops'
  registerAttention(FUSED_ATTENTION_NAME, ({ threads, cache }) => new FusedAttention({ threads, collector: cache?.collector ?? null }));
}

registerFusedAttention();
