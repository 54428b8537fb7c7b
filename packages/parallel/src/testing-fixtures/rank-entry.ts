import { initBlockWeights, resolveBlockConfig } from "@ulysses/block";
/**
 * Worker entry for this package's threads-backend tests (loaded by
 * `launch` in threads-block.test.ts; not built or exported): each rank builds the
 * same random input and weights from a seed, runs one block forward and
 * backward on its shard, and returns its outputs and byte counts.
 */
import type { ProcessGroup } from "@ulysses/collectives";
import { OrtAttention, ReferenceAttention, ReferenceOps, SessionCache } from "@ulysses/kernels";
import { randomTensor, seededRandom } from "@ulysses/kernels/testing";
import { evenSplitSizes } from "@ulysses/tensors";
import { PipelinedUlyssesAttention } from "../pipelined-ulysses.js";
import { shardOf, spBlock, type SpBlockConfig } from "./test-support.js";

export interface TestRunArgs {
  config: SpBlockConfig;
  batch: number;
  seq: number;
  seed: number;
  /** "reference" kernels, or ONNX Runtime attention with reference ops. */
  attention: "reference" | "ort";
  checkpoint?: boolean;
  /** Ulysses pipelined in this many chunks of heads (PipelinedUlyssesAttention). */
  pipelineChunks?: number;
}

/** Full input x and output gradient dy [b, N, hidden], and the weights, from the seed (same on every rank). */
export function testProblem(args: TestRunArgs) {
  const random = seededRandom(args.seed);
  const x = randomTensor([args.batch, args.seq, args.config.hidden], random);
  const dy = randomTensor([args.batch, args.seq, args.config.hidden], random);
  const weights = initBlockWeights(resolveBlockConfig(args.config), args.seed, { perturb: 0.2, std: 0.3 });
  return { x, dy, weights };
}

export default function setup(ctx: { group: ProcessGroup }) {
  const cache = new SessionCache({ intraOpThreads: 1 });
  return {
    async run(args: TestRunArgs) {
      const { group } = ctx;
      const { x, dy, weights } = testProblem(args);
      const sizes = evenSplitSizes(args.seq, group.size);
      const localAttention = args.attention === "ort" ? new OrtAttention({ cache, blockRows: 16 }) : new ReferenceAttention();
      const share = args.pipelineChunks === undefined ? undefined : new PipelinedUlyssesAttention(localAttention, group, { chunks: args.pipelineChunks });
      const block = spBlock(args.config, group, { ops: new ReferenceOps(), localAttention, weights, checkpoint: args.checkpoint ?? false }, share);
      group.resetStats();
      const { y, context } = await block.forward(shardOf(x, sizes, group.rank), { seqLength: args.seq });
      const forwardBytes = group.stats().total.bytesSent;
      const g = await block.backward(context, shardOf(dy, sizes, group.rank));
      return { y: y.data, dx: g.dx.data, flat: g.flat, forwardBytes, allToAllBytes: group.stats().byOp.allToAll.bytesSent };
    },
    async dispose() {
      await cache.release();
    },
  };
}
