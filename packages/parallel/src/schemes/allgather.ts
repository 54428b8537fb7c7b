/**
 * All-gather-KV: every rank gathers the whole sequence's keys and values and
 * attends its own queries over them, all heads on every rank; the backward
 * reduce-scatters dk and dv.
 */
import { AllGatherKVAttention } from "../allgather-kv-attention.js";
import type { SequenceParallelScheme } from "../scheme.js";
import { allGatherKVBytes } from "../scheme-bytes.js";

export const allGatherScheme: SequenceParallelScheme = {
  name: "allgather",
  settings: [],
  resolve: (options) => ({ ulyssesDegree: options.sp, ringDegree: 1 }),
  problems: () => [],
  headRanks: () => 1,
  create: (local, { group }) => new AllGatherKVAttention(local, group),
  bytes: ({ sizes, rank, batch, kvHeads, headDim }) => allGatherKVBytes(sizes, rank, batch, kvHeads, headDim),
  // every rank's keys; the gathers write straight into them (no exchange areas)
  memory: ({ sp, kvHeads, headDim }) => ({ kvWidth: kvHeads * headDim * sp, exchangeAreas: false, travels: 1, chunked: false }),
  describe: () => "allgather attention",
};
