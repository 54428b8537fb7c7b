/**
 * A world of P ranks for `bench:paper` (threads backend, ranks running
 * paper-rank.ts, one ONNX Runtime thread per rank, also at P = 1: the P = 1
 * rows are the one-core calibration configuration of the projection check) and the
 * aggregation of its per-rank results into one row: step time of the slowest
 * rank, bytes and memory of the busiest.
 */
import { launch, type LaunchedWorld } from "@ulysses/collectives";
import { median, medianOfSlowest } from "@ulysses/measure";
import type { BlockConfig } from "@ulysses/block";
import type { SequenceParallelKind } from "@ulysses/parallel";
import type { MemoryAccount } from "./memory-account.js";
import type { BlockStepArgs, BlockStepResult, AllToAllArgs, GemmRateArgs, AttentionRateArgs, LoadedLatencyArgs } from "./paper-rank.js";

export interface RankApi {
  blockStep(args: BlockStepArgs): Promise<BlockStepResult>;
  gemmRate(args: GemmRateArgs): Promise<number[]>;
  attentionRate(args: AttentionRateArgs): Promise<number[]>;
  loadedLatency(args: LoadedLatencyArgs): Promise<{ computeSeconds: number; withMessagesSeconds: number }>;
  allToAll(args: AllToAllArgs): Promise<{ seconds: number; bytesSent: number }>;
}

export interface BlockRow {
  ranks: number;
  seq: number;
  kind: SequenceParallelKind;
  /** Slowest rank's step (forward + backward), ms. */
  stepMs: number;
  forwardMs: number;
  /** Busiest rank's bytes sent in the attention collectives: forward only, whole step. */
  forwardBytes: number;
  stepBytes: number;
  gradBytes: number;
  /** Mean over ranks of the time inside collectives, ms. */
  commMs: number;
  /** Slowest rank's time inside the local attention kernel (median over the timed steps), ms. */
  attentionKernelMs: number;
  /** Busiest rank's memory account. */
  memory: MemoryAccount;
  /** Warm-up steps before the timed ones, and timed steps (median kept). */
  warmups: number;
  iters: number;
}

export class PaperWorld {
  private constructor(
    readonly ranks: number,
    private readonly world: LaunchedWorld<RankApi>,
  ) {}

  static async start(ranks: number): Promise<PaperWorld> {
    const world = await launch<RankApi>({
      worldSize: ranks,
      entry: new URL("./paper-rank.ts", import.meta.url),
      ortThreadsPerRank: 1,
      timeoutMs: 900_000,
    });
    return new PaperWorld(ranks, world);
  }

  async blockRow(config: BlockConfig & { attention: SequenceParallelKind }, seq: number, options: Omit<BlockStepArgs, "config" | "seq">): Promise<BlockRow> {
    const results = await this.world.all("blockStep", { config, seq, ...options });
    const max = (pick: (r: BlockStepResult) => number) => Math.max(...results.map(pick));
    const busiest = [...results].sort((a, b) => b.memory.peakBytes - a.memory.peakBytes)[0]!;
    return {
      ranks: this.ranks,
      seq,
      kind: config.attention,
      stepMs: max((r) => r.stepMs),
      forwardMs: max((r) => r.forwardMs),
      forwardBytes: max((r) => r.forwardBytes),
      stepBytes: max((r) => r.stepBytes),
      gradBytes: max((r) => r.gradBytes),
      commMs: results.reduce((n, r) => n + r.attentionCommMs + r.gradCommMs, 0) / results.length,
      attentionKernelMs: max((r) => r.attentionKernelMs),
      memory: busiest.memory,
      warmups: options.warmups,
      iters: options.iters,
    };
  }

  /**
   * A kernel timed on every rank at once: each repetition's time is the
   * slowest rank's (they start together after a barrier); the median
   * repetition is kept.
   */
  async kernelSeconds(kernel: "gemmRate", args: GemmRateArgs): Promise<number>;
  async kernelSeconds(kernel: "attentionRate", args: AttentionRateArgs): Promise<number>;
  async kernelSeconds(kernel: "gemmRate" | "attentionRate", args: GemmRateArgs | AttentionRateArgs): Promise<number> {
    return medianOfSlowest(await this.world.all(kernel, args as never));
  }

  /**
   * Seconds one tiny all-to-all adds when the ranks compute between messages:
   * (slowest rank's time for `iters` GEMM + message pairs − slowest rank's
   * time for the GEMMs alone) / iters, at least 0; the median of `trials`.
   */
  async loadedLatency(args: LoadedLatencyArgs, trials = 3): Promise<number> {
    const estimates: number[] = [];
    for (let t = 0; t < trials; t++) {
      const r = await this.world.all("loadedLatency", args);
      const slowest = (pick: (x: (typeof r)[number]) => number) => Math.max(...r.map(pick));
      estimates.push(Math.max(0, (slowest((x) => x.withMessagesSeconds) - slowest((x) => x.computeSeconds)) / args.iters));
    }
    return median(estimates);
  }

  /** Median seconds of one all-to-all where every rank holds `bytes` (slowest rank), and the bytes each rank sent. */
  async allToAll(bytes: number, iters: number): Promise<{ seconds: number; bytesSent: number }> {
    const results = await this.world.all("allToAll", { bytes, iters });
    return { seconds: Math.max(...results.map((r) => r.seconds)), bytesSent: Math.max(...results.map((r) => r.bytesSent)) };
  }

  async shutdown(): Promise<void> {
    await this.world.shutdown();
  }
}
