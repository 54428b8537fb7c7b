/**
 * A RankPool over worker threads started by the collectives' `launch`: every
 * call runs on all ranks under a RankSupervisor, whose rejection names the
 * failed or stuck rank; close() releases each rank's sessions, then shuts the
 * workers down (never terminating one inside an ONNX Runtime run).
 */
import { launch, RankSupervisor } from "@ulysses/collectives";
import type { TrainConfig } from "./config.js";
import { TrainerError } from "./errors.js";
import { planRun, type RunPlan } from "./plan.js";
import type { RankApi, RankEntryArgs } from "./rank-entry.js";
import { collectiveTimeoutMs, type RankPool } from "./rank-pool.js";
import { rankHookModules, type RankStepReport } from "./rank-trainer.js";

// From dist/ (the installed bin) the ranks run dist/rank-entry.js with plain
// node; from src/ (the monorepo, under tsx or vitest) they run the TypeScript
// entry, which needs tsx in every worker.
const FROM_SOURCE = import.meta.url.endsWith(".ts");
const ENTRY = new URL(FROM_SOURCE ? "./rank-entry.ts" : "./rank-entry.js", import.meta.url);

function named(cause: unknown, what: string): TrainerError {
  return new TrainerError(`${what}: ${(cause as Error).message ?? String(cause)}`, { cause });
}

export class ThreadsPool implements RankPool {
  private constructor(
    private readonly ranks: RankSupervisor<RankApi>,
    readonly description: string,
    private currentStep: number,
  ) {}

  static async start(config: TrainConfig, resumeFile: string | null, plan: RunPlan = planRun(config)): Promise<ThreadsPool> {
    const worldSize = plan.sp * plan.dp;
    const args: RankEntryArgs = { config, plan, resumeFile, hookModules: rankHookModules() };
    const timeoutMs = collectiveTimeoutMs(config);
    let ranks: RankSupervisor<RankApi>;
    try {
      const world = await launch<RankApi, RankEntryArgs>({
        worldSize,
        entry: ENTRY,
        typescript: FROM_SOURCE,
        args,
        timeoutMs,
        ...(config.threads !== null ? { ortThreadsPerRank: config.threads } : {}),
      });
      ranks = new RankSupervisor(world, timeoutMs);
    } catch (cause) {
      throw named(cause, `starting ${worldSize} ranks on worker threads failed`);
    }
    try {
      const [description] = await ranks.call("description", []);
      const [step] = await ranks.call("step", []);
      return new ThreadsPool(ranks, description!, step!);
    } catch (cause) {
      await ranks.close("close");
      throw named(cause, `starting ${worldSize} ranks on worker threads failed`);
    }
  }

  get worldSize(): number {
    return this.ranks.world.worldSize;
  }

  get isLeader(): boolean {
    return true;
  }

  get step(): number {
    return this.currentStep;
  }

  async runStep(): Promise<RankStepReport> {
    try {
      const [report] = await this.ranks.call("runStep", [], { what: `step ${this.currentStep + 1}`, watchdog: true });
      this.currentStep = report!.step + 1;
      return report!;
    } catch (cause) {
      throw named(cause, `training step ${this.currentStep + 1} failed`);
    }
  }

  async save(file: string): Promise<void> {
    try {
      await this.ranks.call("save", [file], { what: `saving ${file}` });
    } catch (cause) {
      throw named(cause, `saving ${file} failed`);
    }
  }

  async weights(): Promise<Float32Array> {
    return this.ranks.world.rank(0).weights() as Promise<Float32Array>;
  }

  /** Releases every answering rank's sessions, then shuts the workers down; stuck ranks are terminated. */
  async close(): Promise<void> {
    await this.ranks.close("close");
  }
}
