/**
 * How big OrtAttention's runs are: query rows per run (forward and backward)
 * and keys per backward tile. Larger runs amortise the per-run cost
 * (session.run, and the dk/dv partial sums that travel with each backward
 * tile: 6·tile·d floats against 10·rows·tile·d FLOPs); causal blocks compute
 * a rows x rows diagonal square of which half is masked (waste about
 * rows / seqK), so causal rows grow with the sequence; score matrices are
 * capped so they stay near the caches. Chosen by measurement on the 2-core
 * development machine; OrtAttention's options override them.
 */
import type { AttentionDims } from "./shapes.js";

function powerOfTwoNear(x: number): number {
  return 2 ** Math.round(Math.log2(Math.max(1, x)));
}

function clamp(x: number, low: number, high: number): number {
  return Math.min(high, Math.max(low, x));
}

/** Query rows per backward run (over the kv head's query group). */
export function defaultBackwardRows(dims: AttentionDims): number {
  return dims.causal ? clamp(powerOfTwoNear(dims.seqK / 16), 256, 512) : 512;
}

/** Query rows per forward run: as backward, but the [rows, keys] scores stay within 8 MiB. */
export function defaultForwardRows(dims: AttentionDims): number {
  const cap = Math.max(64, 2 ** Math.floor(Math.log2((2 * 1024 * 1024) / Math.max(1, dims.seqK))));
  return Math.min(defaultBackwardRows(dims), cap);
}

/** Keys per backward tile: the [tile, rows] score matrices stay within 2 MiB. */
export function defaultTileKeys(rows: number): number {
  return Math.max(256, 2 ** Math.floor(Math.log2((512 * 1024) / Math.max(1, rows))));
}
