/**
 * A RankPool over worker threads started by the collectives' `launch`: every
 * call runs on all ranks (`launched.all`), whose rejection names the failed
 * rank; close() releases each rank's sessions, then shuts the workers down
 * (never terminating one inside an ONNX Runtime run).
 */
import { launch, type LaunchedWorld } from "@ulysses/collectives";
import type { TrainConfig } from "./config.js";
import { TrainerError } from "./errors.js";
import type { RankApi, RankEntryArgs } from "./rank-entry.js";
import type { RankPool } from "./rank-pool.js";
import type { RankStepReport } from "./rank-trainer.js";

// From dist/ (the installed bin) the ranks run dist/rank-entry.js with plain
// node; from src/ (the monorepo, under tsx or vitest) they run the TypeScript
// entry, which needs tsx in every worker.
const FROM_SOURCE = import.meta.url.endsWith(".ts");
const ENTRY = new URL(FROM_SOURCE ? "./rank-entry.ts" : "./rank-entry.js", import.meta.url);

/** Collective waits may last this long (a long step on a slow rank is not a failure; a dead peer is reported at once). */
const TIMEOUT_MS = 600_000;

function named(cause: unknown, what: string): TrainerError {
  return new TrainerError(`${what}: ${(cause as Error).message ?? String(cause)}`, { cause });
}

export class ThreadsPool implements RankPool {
  private constructor(
    private readonly world: LaunchedWorld<RankApi>,
    readonly description: string,
    private currentStep: number,
  ) {}

  static async start(config: TrainConfig, resumeFile: string | null): Promise<ThreadsPool> {
    const worldSize = config.sp * config.dp;
    const args: RankEntryArgs = { config, resumeFile };
    let world: LaunchedWorld<RankApi>;
    try {
      world = await launch<RankApi, RankEntryArgs>({ worldSize, entry: ENTRY, typescript: FROM_SOURCE, args, timeoutMs: TIMEOUT_MS, ...(config.threads !== null ? { ortThreadsPerRank: config.threads } : {}) });
    } catch (cause) {
      throw named(cause, `starting ${worldSize} ranks on worker threads failed`);
    }
    const [description] = await world.all("description");
    const [step] = await world.all("step");
    return new ThreadsPool(world, description!, step!);
  }

  get worldSize(): number {
    return this.world.worldSize;
  }

  get isLeader(): boolean {
    return true;
  }

  get step(): number {
    return this.currentStep;
  }

  async runStep(): Promise<RankStepReport> {
    try {
      const [report] = await this.world.all("runStep");
      this.currentStep = report!.step + 1;
      return report!;
    } catch (cause) {
      throw named(cause, `training step ${this.currentStep} failed`);
    }
  }

  async save(file: string): Promise<void> {
    try {
      await this.world.all("save", file);
    } catch (cause) {
      throw named(cause, `saving ${file} failed`);
    }
  }

  async weights(): Promise<Float32Array> {
    return this.world.rank(0).weights() as Promise<Float32Array>;
  }

  async close(): Promise<void> {
    await this.world.all("close").catch(() => undefined);
    await this.world.shutdown();
  }
}
