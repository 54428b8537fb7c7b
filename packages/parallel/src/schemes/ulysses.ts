/**
 * Ulysses (DeepSpeed-Ulysses): all-to-alls turn sequence shards into head
 * shards around the local kernel, every rank attending over the whole
 * sequence for its heads; pipelined in chunks of heads when asked.
 */
import { headRouting } from "../head-routing.js";
import { PipelinedUlyssesAttention } from "../pipelined-ulysses.js";
import type { SequenceParallelScheme } from "../scheme.js";
import { ulyssesBytes } from "../scheme-bytes.js";
import { UlyssesAttention } from "../ulysses-attention.js";

export const ulyssesScheme: SequenceParallelScheme = {
  name: "ulysses",
  settings: ["pipelineChunks"],
  resolve: (options) => ({ ulyssesDegree: options.sp, ringDegree: 1 }),
  problems(options, shape, _degrees, n) {
    const { sp } = options;
    const problems: string[] = [];
    if (shape.heads < sp)
      problems.push(
        `${n.heads} ${shape.heads} is smaller than ${n.sp} ${sp}: Ulysses gives every rank at least one attention head (use ${n.sp} <= ${n.heads}, or ring, hybrid or allgather attention)`,
      );
    const g = options.pipelineChunks;
    if (g === undefined || g === 1) return problems;
    if (!Number.isInteger(g) || g < 1) problems.push(`${n.pipelineChunks} must be a positive integer, got ${g}`);
    else if (shape.heads % g !== 0 || shape.kvHeads % g !== 0)
      problems.push(`${n.pipelineChunks} ${g} must divide ${n.heads} ${shape.heads} and the kv heads ${shape.kvHeads}`);
    else if (shape.heads / g < sp)
      problems.push(
        `${n.heads} ${shape.heads} / ${n.pipelineChunks} ${g} = ${shape.heads / g} heads per chunk is fewer than ${n.sp} ${sp}: every rank needs a head of each chunk`,
      );
    return problems;
  },
  headRanks: (degrees) => degrees.ulyssesDegree,
  // UlyssesAttention does; the pipelined one does not
  keepsOutputs: (pipelineChunks) => pipelineChunks === 1,
  create: (local, { group, pipelineChunks }) =>
    pipelineChunks > 1 ? new PipelinedUlyssesAttention(local, group, { chunks: pipelineChunks }) : new UlyssesAttention(local, group),
  bytes: ({ sizes, rank, batch, heads, kvHeads, headDim }) => ulyssesBytes(headRouting(heads, kvHeads, sizes.length), sizes, rank, batch, headDim),
  memory: ({ sp, kvHeads, headDim, degrees, pipelineChunks }) => ({
    // the rank's kv heads over the whole sequence, replicated up to one per rank when kvHeads < sp
    kvWidth: Math.max(kvHeads, sp) * headDim,
    exchangeAreas: true,
    travels: (degrees.ulyssesDegree - 1) / degrees.ulyssesDegree,
    // pipeline chunks keep their concurrent exchanges whole
    chunked: pipelineChunks === 1,
  }),
  describe: () => "ulysses attention",
};
