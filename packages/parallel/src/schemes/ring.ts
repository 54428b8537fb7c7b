/**
 * Ring attention: keys and values travel around the SP ranks a block at a
 * time while each rank attends its own queries, merging partial results by
 * their log-sum-exp; zigzag layout by default, to balance causal work.
 */
import { RingAttention } from "../ring-attention.js";
import type { SequenceParallelScheme } from "../scheme.js";
import { ringBytes } from "../scheme-bytes.js";

export const ringScheme: SequenceParallelScheme = {
  name: "ring",
  settings: [],
  resolve: (options) => ({ ulyssesDegree: 1, ringDegree: options.sp }),
  problems: () => [],
  headRanks: () => 1,
  create: (local, { group }) => new RingAttention(local, group),
  bytes: ({ sizes, rank, batch, kvHeads, headDim, skipsFuture }) => ringBytes(sizes, rank, skipsFuture, batch, kvHeads, headDim),
  // its own block, the visiting one and the next one arriving
  memory: ({ kvHeads, headDim }) => ({ kvWidth: 3 * kvHeads * headDim, exchangeAreas: true, travels: 1, chunked: false }),
  describe: (_degrees, layout) => `ring attention (${layout} layout)`,
};
