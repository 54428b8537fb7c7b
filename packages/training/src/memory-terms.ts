/**
 * The optimizer's own term of a training run's memory account: AdamW's
 * moments m and v, fp32, over the ranks on one machine. Under ZeRO-1 the
 * ranks hold 1/ranks of them each, which sums to one full pair, and a
 * checkpoint gathers the full pair once more.
 */

/** Bytes of AdamW's moments over `ranks` ranks holding `parameters` each (ZeRO-1: sharded, plus the pair a checkpoint gathers). */
export function adamwMomentBytes(parameters: number, ranks: number, zero1: boolean): number {
  const pair = 2 * 4 * parameters;
  return zero1 ? pair + pair : ranks * pair;
}
