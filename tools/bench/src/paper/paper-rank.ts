/**
 * One rank of `pnpm bench:paper` (a threads-backend worker started by
 * `launch`). Two measurements:
 *
 * - `blockStep`: one TransformerBlock forward + backward on this rank's shard
 *   with ONNX Runtime kernels (the machinery of bench:block), returning the
 *   step time, the bytes this rank sent in the attention collectives after
 *   the forward and after the whole step (from the group's own accounting),
 *   the gradient all-reduce, and the memory account of `memory-account.ts`.
 * - `allToAll`: time of one all-to-all of a given size (bandwidth and latency
 *   for the projection's profile).
 *
 * Tables are made by the orchestrator (paper-bench.ts).
 */
import type { ProcessGroup } from "@ulysses/collectives";
import { createOrtOps, OrtAttention, SessionCache, type BlockOps } from "@ulysses/kernels";
import { AllGatherKVAttention, TransformerBlock, UlyssesAttention, type BlockConfig } from "@ulysses/block";
import { evenSplitSizes, Rng, Tensor } from "@ulysses/tensors";
import { memoryAccount, recordingGroup, RecordingLocalAttention, RecordingShardedAttention, type ExchangeRecord, type MemoryAccount } from "./memory-account.js";

export interface BlockStepArgs {
  config: BlockConfig;
  seq: number;
  /** Timed steps (the median is kept); 0 times the first (cold) step. */
  iters: number;
  /** Untimed steps first (sessions, buffers and JIT warm up there). */
  warmups: number;
  /** Drop every ONNX Runtime session first (the max-sequence search visits many shapes). */
  freshSessions: boolean;
}

export interface BlockStepResult {
  stepMs: number;
  forwardMs: number;
  /** Bytes sent in the attention collectives by the end of the forward, and over the whole step. */
  forwardBytes: number;
  stepBytes: number;
  /** Bytes sent in the weight-gradient all-reduce. */
  gradBytes: number;
  /** Time inside the attention collectives and the all-reduce (includes waiting for peers), ms. */
  attentionCommMs: number;
  gradCommMs: number;
  memory: MemoryAccount;
}

export interface AllToAllArgs {
  /** Bytes of this rank's all-to-all input. */
  bytes: number;
  iters: number;
}

interface RankContext {
  rank: number;
  worldSize: number;
  group: ProcessGroup;
  ortThreads: number;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

export default function setup(ctx: RankContext) {
  const { group } = ctx;
  let cache = new SessionCache({ intraOpThreads: ctx.ortThreads });
  let ops: BlockOps = createOrtOps(cache);
  let kernel = new OrtAttention({ cache });
  return {
    async blockStep(args: BlockStepArgs): Promise<BlockStepResult> {
      if (args.freshSessions) {
        await cache.release();
        cache = new SessionCache({ intraOpThreads: ctx.ortThreads });
        ops = createOrtOps(cache);
        kernel = new OrtAttention({ cache });
      }
      const exchange: ExchangeRecord = { maxInputBytes: 0, maxOutputBytes: 0 };
      const recorded = recordingGroup(group, exchange);
      const local = new RecordingLocalAttention(kernel);
      const Wrapper = (args.config.attention ?? "ulysses") === "ulysses" ? UlyssesAttention : AllGatherKVAttention;
      const attention = new RecordingShardedAttention(new Wrapper(local, recorded));
      const block = new TransformerBlock(args.config, { ops, attention, group: recorded, seed: 1 });
      const rows = evenSplitSizes(args.seq, group.size)[group.rank]!;
      const rng = new Rng(7, group.rank);
      const x = new Tensor("float32", [1, rows, args.config.hidden]);
      const dy = new Tensor("float32", [1, rows, args.config.hidden]);
      rng.fillNormal(x.data);
      rng.fillNormal(dy.data, 0, 0.01);
      const attentionOps = () => {
        const s = group.stats().byOp;
        return [s.allToAll, s.allGather, s.reduceScatter];
      };
      let savedBytes = 0;
      let weightBytes = 0;
      const step = async () => {
        await group.barrier();
        group.resetStats();
        const t0 = performance.now();
        const { context } = await block.forward(x, { seqLength: args.seq });
        const t1 = performance.now();
        const forwardBytes = attentionOps().reduce((n, o) => n + o.bytesSent, 0);
        savedBytes = Math.max(savedBytes, context.savedBytes);
        const { flat } = await block.backward(context, dy);
        const t2 = performance.now();
        weightBytes = 2 * flat.byteLength;
        const s = group.stats().byOp;
        return {
          stepMs: t2 - t0,
          forwardMs: t1 - t0,
          forwardBytes,
          stepBytes: attentionOps().reduce((n, o) => n + o.bytesSent, 0),
          gradBytes: s.allReduce.bytesSent,
          attentionCommMs: attentionOps().reduce((n, o) => n + o.timeMs, 0),
          gradCommMs: s.allReduce.timeMs,
        };
      };
      const runs = [];
      for (let i = 0; i < Math.max(args.warmups, args.iters === 0 ? 1 : 0); i++) runs.push(await step());
      const timed = args.iters === 0 ? runs : [];
      for (let i = 0; i < args.iters; i++) timed.push(await step());
      const mid = [...timed].sort((a, b) => a.stepMs - b.stepMs)[Math.floor(timed.length / 2)]!;
      const memory = memoryAccount({
        savedBytes,
        exchangeBytes: exchange.maxInputBytes + exchange.maxOutputBytes,
        kernelBackwardBytes: local.backwardIoBytes,
        attentionGradientBytes: attention.gradientBytes,
        upstreamGradientBytes: dy.byteLength,
        weightBytes,
      });
      return { ...mid, forwardMs: median(timed.map((r) => r.forwardMs)), memory };
    },

    async allToAll(args: AllToAllArgs): Promise<{ seconds: number; bytesSent: number }> {
      const p = group.size;
      const floats = Math.max(p, Math.floor(args.bytes / 4 / p) * p);
      const input = new Tensor("float32", [floats]);
      const output = new Tensor("float32", [floats]);
      input.data.fill(group.rank);
      await group.allToAll(input, { output }); // warm-up: shared buffers and pages
      const times: number[] = [];
      let bytesSent = 0;
      for (let i = 0; i < args.iters; i++) {
        await group.barrier();
        group.resetStats();
        const t0 = performance.now();
        await group.allToAll(input, { output });
        times.push((performance.now() - t0) / 1000);
        bytesSent = group.stats().byOp.allToAll.bytesSent;
      }
      return { seconds: median(times), bytesSent };
    },

    async dispose() {
      await cache.release();
    },
  };
}
