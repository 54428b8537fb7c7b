/**
 * How the driver reaches the ranks. A RankPool runs one method on every rank
 * of the world and returns world rank 0's answer; it hides whether the ranks
 * live in this thread (`local`), in worker threads (`threads`) or in other
 * processes started by mpirun (then the pool holds only this process's rank).
 * A rank's failure rejects with a TrainerError naming the rank and the cause.
 */
import { createLocalGroups } from "@ulysses/collectives";
import { TrainerError } from "./errors.js";
import { RankTrainer, type RankSetup, type RankStepReport } from "./rank-trainer.js";
import type { TrainConfig } from "./config.js";
import { planRun, type RunPlan } from "./plan.js";

/** The collective timeout and stuck-rank watchdog of this run, in ms (--timeout, in seconds; default 300). */
export function collectiveTimeoutMs(config: TrainConfig): number {
  return config.timeout * 1000;
}

export interface RankPool {
  readonly worldSize: number;
  /** Whether this process holds world rank 0 (and so prints and writes the run's files). */
  readonly isLeader: boolean;
  /** Kernel description from rank 0. */
  readonly description: string;
  /** Steps already taken (after a resume). */
  readonly step: number;
  runStep(): Promise<RankStepReport>;
  save(file: string): Promise<void>;
  /** World rank 0's parameters (the driver exports them). */
  weights(): Promise<Float32Array>;
  close(): Promise<void>;
}

/** Runs `fn` on every rank; the first failure names its rank. */
export async function onEveryRank<T>(ranks: readonly RankTrainer[], fn: (rank: RankTrainer) => Promise<T>, offset = 0): Promise<T[]> {
  return Promise.all(
    ranks.map((rank, i) =>
      fn(rank).catch((cause: unknown) => {
        throw new TrainerError(`rank ${offset + i} failed: ${(cause as Error).message ?? String(cause)}`, { cause });
      }),
    ),
  );
}

/** A pool over RankTrainers living in this thread (all of them, or this process's one under mpirun). */
export class InProcessPool implements RankPool {
  constructor(
    private readonly ranks: readonly RankTrainer[],
    readonly worldSize: number,
    private readonly firstRank: number,
  ) {}

  /** All ranks in this thread, connected by the local (reference) backend. */
  static async local(config: TrainConfig, resumeFile: string | null, plan: RunPlan = planRun(config)): Promise<InProcessPool> {
    const groups = createLocalGroups(plan.sp * plan.dp, { timeoutMs: collectiveTimeoutMs(config) });
    const setups: RankSetup[] = groups.map((world) => ({ world, config, plan, ranksInProcess: groups.length, resumeFile }));
    const ranks = await Promise.all(
      setups.map((setup, i) =>
        RankTrainer.create(setup).catch((cause: unknown) => {
          throw new TrainerError(`rank ${i} failed to start: ${(cause as Error).message}`, { cause });
        }),
      ),
    );
    return new InProcessPool(ranks, groups.length, 0);
  }

  get isLeader(): boolean {
    return this.firstRank === 0;
  }

  get description(): string {
    return this.ranks[0]!.description;
  }

  get step(): number {
    return this.ranks[0]!.step;
  }

  async runStep(): Promise<RankStepReport> {
    const step = this.step;
    try {
      return (await onEveryRank(this.ranks, (r) => r.runStep(), this.firstRank))[0]!;
    } catch (cause) {
      throw new TrainerError(`training step ${step + 1} failed: ${(cause as Error).message}`, { cause });
    }
  }

  async save(file: string): Promise<void> {
    await onEveryRank(this.ranks, (r) => r.save(file), this.firstRank);
  }

  async weights(): Promise<Float32Array> {
    return this.ranks[0]!.weights();
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.ranks.map((r) => r.close()));
  }
}
