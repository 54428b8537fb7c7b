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
 * - `loadedLatency`: the time a tiny all-to-all adds when the ranks compute
 *   between messages (a block GEMM before each), as in a block step: the
 *   all-to-all's latency including waiting for ranks the scheduler put aside.
 * - `gemmRate`, `attentionRate`: the kernels of the block alone, timed on
 *   every rank at once (a barrier before each repetition), so that each rank
 *   shares the cores as it does in the block steps: the block's forward GEMMs
 *   (block-gemm.ts) and the local attention kernel's forward + backward on
 *   [1, N, heads, headDim] (the shape a rank's kernel sees under Ulysses).
 *
 * Tables are made by the orchestrator (paper-bench.ts).
 */
import type { OpKind, ProcessGroup } from "@ulysses/collectives";
import { commDelta, median, medianBy } from "@ulysses/measure";
import { createOrtOps, OrtAttention, SessionCache, type BlockOps } from "@ulysses/kernels";
import { TransformerBlock, type BlockConfig } from "@ulysses/block";
import { AllGatherKVAttention, ParallelBlock, UlyssesAttention, type SequenceParallelKind } from "@ulysses/parallel";
import { evenSplitSizes, randomUniform, Rng, Tensor } from "@ulysses/tensors";
import { blockGemm, timedRepeats, warmUp } from "./block-gemm.js";
import {
  memoryAccount,
  recordingGroup,
  RecordingLocalAttention,
  RecordingShardedAttention,
  type ExchangeRecord,
  type MemoryAccount,
} from "./memory-account.js";

export interface BlockStepArgs {
  config: BlockConfig & { attention?: SequenceParallelKind };
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
  /** Time inside the local attention kernel (forward + backward), ms. */
  attentionKernelMs: number;
  memory: MemoryAccount;
}

export interface GemmRateArgs {
  rows: number;
  hidden: number;
  repeats: number;
}

export interface AttentionRateArgs {
  seq: number;
  heads: number;
  headDim: number;
  causal: boolean;
  repeats: number;
}

export interface LoadedLatencyArgs {
  /** Rows of the block GEMMs each rank runs between two messages. */
  rows: number;
  hidden: number;
  iters: number;
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

/** The collectives of the attention exchanges (the gradient all-reduce is counted apart). */
const ATTENTION_OPS: readonly OpKind[] = ["allToAll", "allGather", "reduceScatter"];

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
      const { attention: kind = "ulysses", ...blockConfig } = args.config;
      const Wrapper = kind === "ulysses" ? UlyssesAttention : AllGatherKVAttention;
      const attention = new RecordingShardedAttention(new Wrapper(local, recorded));
      const block = new ParallelBlock(new TransformerBlock(blockConfig, { ops, localAttention: local, seed: 1 }), recorded, attention);
      const rows = evenSplitSizes(args.seq, group.size)[group.rank]!;
      const rng = new Rng(7, group.rank);
      const x = new Tensor("float32", [1, rows, args.config.hidden]);
      const dy = new Tensor("float32", [1, rows, args.config.hidden]);
      rng.fillNormal(x.data);
      rng.fillNormal(dy.data, 0, 0.01);
      let savedBytes = 0;
      let weightBytes = 0;
      const step = async () => {
        await group.barrier();
        const before = group.stats();
        local.kernelMs = 0;
        const t0 = performance.now();
        const { context } = await block.forward(x, { seqLength: args.seq });
        const t1 = performance.now();
        const forwardBytes = commDelta(before, group.stats(), ATTENTION_OPS).bytesSent;
        savedBytes = Math.max(savedBytes, context.block.savedBytes);
        const { flat } = await block.backward(context, dy);
        const t2 = performance.now();
        weightBytes = 2 * flat.byteLength;
        const after = group.stats();
        const attentionComm = commDelta(before, after, ATTENTION_OPS);
        const gradComm = commDelta(before, after, ["allReduce"]);
        return {
          stepMs: t2 - t0,
          forwardMs: t1 - t0,
          forwardBytes,
          stepBytes: attentionComm.bytesSent,
          gradBytes: gradComm.bytesSent,
          attentionCommMs: attentionComm.timeMs,
          gradCommMs: gradComm.timeMs,
          attentionKernelMs: local.kernelMs,
        };
      };
      const runs = [];
      for (let i = 0; i < Math.max(args.warmups, args.iters === 0 ? 1 : 0); i++) runs.push(await step());
      const timed = args.iters === 0 ? runs : [];
      for (let i = 0; i < args.iters; i++) timed.push(await step());
      const mid = medianBy(timed, (r) => r.stepMs);
      const memory = memoryAccount({
        savedBytes,
        exchangeBytes: exchange.maxInputBytes + exchange.maxOutputBytes,
        kernelBackwardBytes: local.backwardIoBytes,
        attentionGradientBytes: attention.gradientBytes,
        upstreamGradientBytes: dy.byteLength,
        weightBytes,
      });
      return { ...mid, forwardMs: median(timed.map((r) => r.forwardMs)), attentionKernelMs: median(timed.map((r) => r.attentionKernelMs)), memory };
    },

    /** Seconds of each repetition of the block's forward GEMMs (after untimed warm-up runs). */
    async gemmRate(args: GemmRateArgs): Promise<number[]> {
      const g = blockGemm(cache, args.rows, args.hidden);
      await g.warm();
      return timedRepeats(group, args.repeats, () => g.run());
    },

    /** Seconds of each repetition of the attention kernel's forward + backward (after untimed runs). */
    async attentionRate(args: AttentionRateArgs): Promise<number[]> {
      const options = { causal: args.causal };
      const [q, k, v, dOut] = [0, 1, 2, 3].map(
        (i) => randomUniform([1, args.seq, args.heads, args.headDim], { seed: 5 + i + 16 * group.rank, low: -1, high: 1 }) as Tensor<"float32">,
      ) as [Tensor<"float32">, Tensor<"float32">, Tensor<"float32">, Tensor<"float32">];
      const run = async () => {
        const f = await kernel.forward(q, k, v, options);
        await kernel.backward(q, k, v, f.out, dOut, f.logSumExp, options);
      };
      // Untimed runs at N, at least one and 2 s (they also make the sessions): the first measurement
      // of a fresh world ran up to 2x slow (the block's first row warms twice for the same reason).
      await warmUp(run, 1, 2000);
      return timedRepeats(group, args.repeats, run);
    },

    /** Seconds of `iters` GEMMs alone and of `iters` (GEMM, tiny all-to-all) pairs. */
    async loadedLatency(args: LoadedLatencyArgs): Promise<{ computeSeconds: number; withMessagesSeconds: number }> {
      const g = blockGemm(cache, args.rows, args.hidden);
      await g.warm();
      const floats = 16 * group.size;
      const input = new Tensor("float32", [floats]);
      const output = new Tensor("float32", [floats]);
      await group.allToAll(input, { output });
      const timed = async (withMessages: boolean) => {
        await group.barrier();
        const t0 = performance.now();
        for (let i = 0; i < args.iters; i++) {
          await g.run();
          if (withMessages) await group.allToAll(input, { output });
        }
        return (performance.now() - t0) / 1000;
      };
      const computeSeconds = await timed(false);
      const withMessagesSeconds = await timed(true);
      return { computeSeconds, withMessagesSeconds };
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
        const before = group.stats();
        const t0 = performance.now();
        await group.allToAll(input, { output });
        times.push((performance.now() - t0) / 1000);
        bytesSent = commDelta(before, group.stats(), ["allToAll"]).bytesSent;
      }
      return { seconds: median(times), bytesSent };
    },

    async dispose() {
      await cache.release();
    },
  };
}
