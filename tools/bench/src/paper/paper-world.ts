/**
 * A world of P ranks for `bench:paper` (threads backend, ranks running
 * paper-rank.ts, one ONNX Runtime thread per rank, also at P = 1: the P = 1
 * rows are the one-core calibration configuration of the projection check) and the
 * aggregation of its per-rank results into one row: step time of the slowest
 * rank, bytes and memory of the busiest.
 */
import { launch, type LaunchedWorld } from "@ulysses/collectives";
import type { AttentionKind, BlockConfig } from "@ulysses/block";
import type { MemoryAccount } from "./memory-account.js";
import type { BlockStepArgs, BlockStepResult, AllToAllArgs } from "./paper-rank.js";

export interface RankApi {
  blockStep(args: BlockStepArgs): Promise<BlockStepResult>;
  allToAll(args: AllToAllArgs): Promise<{ seconds: number; bytesSent: number }>;
}

export interface BlockRow {
  ranks: number;
  seq: number;
  kind: AttentionKind;
  /** Slowest rank's step (forward + backward), ms. */
  stepMs: number;
  forwardMs: number;
  /** Busiest rank's bytes sent in the attention collectives: forward only, whole step. */
  forwardBytes: number;
  stepBytes: number;
  gradBytes: number;
  /** Mean over ranks of the time inside collectives, ms. */
  commMs: number;
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

  async blockRow(config: BlockConfig & { attention: AttentionKind }, seq: number, options: Omit<BlockStepArgs, "config" | "seq">): Promise<BlockRow> {
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
      memory: busiest.memory,
      warmups: options.warmups,
      iters: options.iters,
    };
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
