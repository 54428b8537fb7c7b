/**
 * One rank of `pnpm bench:block` (a threads-backend worker started by
 * launch): builds a TransformerBlock with ONNX Runtime kernels on its world
 * group and times forward + backward on its shard of a random sequence.
 * Timing, bytes and communication time are measured here; the table is made
 * by block-bench.ts.
 */
import type { OpKind, ProcessGroup } from "@ulysses/collectives";
import { commDelta, median, medianBy } from "@ulysses/measure";
import { createOrtOps, OrtAttention, SessionCache } from "@ulysses/kernels";
import { TransformerBlock, type BlockConfig } from "@ulysses/block";
import { ParallelBlock, type SequenceParallelKind } from "@ulysses/parallel";
import { evenSplitSizes, Rng, Tensor } from "@ulysses/tensors";

export interface BlockRunArgs {
  config: BlockConfig & { attention?: SequenceParallelKind };
  batch: number;
  seq: number;
  iters: number;
  checkpoint: boolean;
}

export interface BlockRunResult {
  /** Median forward + backward wall time over the timed iterations (ms). */
  stepMs: number;
  forwardMs: number;
  /** Bytes this rank sent in one step, by purpose. */
  attentionBytes: number;
  gradBytes: number;
  /** Time inside collectives in one step (ms; includes waiting for slower peers). */
  attentionCommMs: number;
  gradCommMs: number;
  savedBytes: number;
  /** Time inside the local attention kernel and inside the other ops (ms). */
  kernelAttentionMs: number;
  kernelOpsMs: number;
}

interface RankContext {
  rank: number;
  worldSize: number;
  group: ProcessGroup;
  ortThreads: number;
}

/** The collectives of the attention exchanges (the gradient all-reduce is counted apart). */
const ATTENTION_OPS: readonly OpKind[] = ["allToAll", "allGather", "reduceScatter"];

/** Wraps every method of `target` so the time spent inside it adds to `clock.ms`. */
function timed<T extends object>(target: T, clock: { ms: number }): T {
  return new Proxy(target, {
    get(obj, name, receiver) {
      const member = Reflect.get(obj, name, receiver) as unknown;
      if (typeof member !== "function") return member;
      return async (...args: unknown[]) => {
        const t0 = performance.now();
        try {
          return await (member as (...a: unknown[]) => unknown).apply(obj, args);
        } finally {
          clock.ms += performance.now() - t0;
        }
      };
    },
  });
}

export default function setup(ctx: RankContext) {
  const cache = new SessionCache({ intraOpThreads: ctx.ortThreads });
  const opsClock = { ms: 0 };
  const attentionClock = { ms: 0 };
  const ops = timed(createOrtOps(cache), opsClock);
  const attention = timed(new OrtAttention({ cache }), attentionClock);
  const { group } = ctx;
  return {
    async run(args: BlockRunArgs): Promise<BlockRunResult> {
      const { attention: kind = "ulysses", ...blockConfig } = args.config;
      const block = new ParallelBlock(new TransformerBlock(blockConfig, { ops, localAttention: attention, seed: 1, checkpoint: args.checkpoint }), group, kind);
      const local = evenSplitSizes(args.seq, group.size)[group.rank]!;
      const rng = new Rng(7, group.rank);
      const x = new Tensor("float32", [args.batch, local, args.config.hidden]);
      const dy = new Tensor("float32", [args.batch, local, args.config.hidden]);
      rng.fillNormal(x.data);
      rng.fillNormal(dy.data, 0, 0.01);
      const step = async () => {
        const t0 = performance.now();
        const { context } = await block.forward(x, { seqLength: args.seq });
        const t1 = performance.now();
        const savedBytes = context.block.savedBytes;
        await block.backward(context, dy);
        return { forwardMs: t1 - t0, stepMs: performance.now() - t0, savedBytes };
      };
      await step(); // warm-up: sessions are created here
      const runs: BlockRunResult[] = [];
      for (let i = 0; i < args.iters; i++) {
        await group.barrier();
        const before = group.stats();
        opsClock.ms = 0;
        attentionClock.ms = 0;
        const timing = await step();
        const after = group.stats();
        const attentionComm = commDelta(before, after, ATTENTION_OPS);
        const gradComm = commDelta(before, after, ["allReduce"]);
        runs.push({
          ...timing,
          attentionBytes: attentionComm.bytesSent,
          gradBytes: gradComm.bytesSent,
          attentionCommMs: attentionComm.timeMs,
          gradCommMs: gradComm.timeMs,
          kernelAttentionMs: attentionClock.ms,
          kernelOpsMs: opsClock.ms,
        });
      }
      const mid = medianBy(runs, (r) => r.stepMs);
      return { ...mid, forwardMs: median(runs.map((r) => r.forwardMs)) };
    },
    async dispose() {
      await cache.release();
    },
  };
}
