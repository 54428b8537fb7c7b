/**
 * How the driver reaches the ranks: a RankPool starts the world through the
 * collectives' `startRanks` (worker threads for `threads`, this thread for
 * `local`, this process's own rank under mpirun or a user backend), each rank
 * running rank-entry.ts's setup, and calls one method on every rank it holds,
 * returning world rank 0's answer (its own rank's under mpirun). A rank's
 * failure rejects with a TrainerError naming the rank and the cause; a rank
 * stuck in compute is named by the supervisor's watchdog (threads).
 */
import { listBackends, startRanks, type RankWorld } from "@ulysses/collectives";
import { randomUUID } from "node:crypto";
import { parameterCount } from "@ulysses/model";
import { processSharedFloats } from "@ulysses/native-ops";
import type { TokenScores } from "@ulysses/training";
import type { TrainConfig } from "./config.js";
import { TrainerError } from "./errors.js";
import { planRun, type RunPlan } from "./plan.js";
import type { RankApi, RankEntryArgs, SharedWeights } from "./rank-entry.js";
import { rankHookModules, type RankStepReport } from "./rank-trainer.js";

// From dist/ (the installed bin) the ranks run dist/rank-entry.js with plain
// node; from src/ (the monorepo, under tsx or vitest) they run the TypeScript
// entry, which needs tsx in every worker.
const FROM_SOURCE = import.meta.url.endsWith(".ts");
const ENTRY = new URL(FROM_SOURCE ? "./rank-entry.ts" : "./rank-entry.js", import.meta.url);

function named(cause: unknown, what: string): TrainerError {
  return new TrainerError(`${what}: ${(cause as Error).message ?? String(cause)}`, { cause });
}

/** Registers the MPI backend by importing its package (it is optional: the addon needs OpenMPI). */
async function loadMpiBackend(): Promise<void> {
  if (listBackends().includes("mpi")) return;
  const name = "@ulysses/collectives-mpi";
  try {
    await import(name);
  } catch (cause) {
    throw new TrainerError(`--backend mpi needs the package ${name} (built against OpenMPI) importable from the trainer: ${(cause as Error).message}`, {
      cause,
    });
  }
}

/**
 * --shared-weights: one copy of the weights for every rank of this process,
 * in the native addon's process-wide memory under a name of this run (zeroed;
 * the ranks fill it). This thread's view keeps it mapped while the pool lives.
 */
function sharedWeightsOf(config: TrainConfig, plan: RunPlan): { shared: SharedWeights; view: Float32Array } | null {
  if (!config.sharedWeights) return null;
  const shared = { name: `ulysses-weights-${randomUUID()}`, length: parameterCount(plan.model) };
  return { shared, view: processSharedFloats(shared.name, shared.length) };
}

export class RankPool {
  private constructor(
    private readonly world: RankWorld<RankApi>,
    readonly description: string,
    private currentStep: number,
    /** --shared-weights: this thread's view of the ranks' one copy, which keeps it mapped until the pool goes. */
    readonly sharedWeights: Float32Array | null,
  ) {}

  /** Starts the ranks of `config.backend`. */
  static async start(config: TrainConfig, resumeFile: string | null, plan: RunPlan = planRun(config)): Promise<RankPool> {
    const { backend } = config;
    if (backend === "mpi") await loadMpiBackend();
    const worldSize = plan.sp * plan.dp;
    const where = backend === "threads" ? "on worker threads" : `on the ${backend} backend`;
    const weights = sharedWeightsOf(config, plan);
    let world: RankWorld<RankApi>;
    try {
      world = await startRanks<RankApi, RankEntryArgs>({
        backend,
        worldSize,
        entry: ENTRY,
        typescript: FROM_SOURCE,
        args: { config, plan, resumeFile, hookModules: rankHookModules(), ...(weights !== null ? { sharedWeights: weights.shared } : {}) },
        timeoutMs: config.timeout * 1000,
        ...(config.threads !== null ? { ortThreadsPerRank: config.threads } : {}),
      });
    } catch (cause) {
      throw named(cause, `starting ${worldSize} ranks ${where} failed`);
    }
    try {
      const [description] = await world.call("description", []);
      const [step] = await world.call("step", []);
      return new RankPool(world, description!, step!, weights?.view ?? null);
    } catch (cause) {
      await world.close("close");
      throw named(cause, `starting ${worldSize} ranks ${where} failed`);
    }
  }

  get worldSize(): number {
    return this.world.worldSize;
  }

  /** Whether this process holds world rank 0 (and so prints and writes the run's files). */
  get isLeader(): boolean {
    return this.world.ranks[0] === 0;
  }

  /** Steps already taken (after a resume). */
  get step(): number {
    return this.currentStep;
  }

  async runStep(): Promise<RankStepReport> {
    try {
      const [report] = await this.world.call("runStep", [], { what: `step ${this.currentStep + 1}`, watchdog: true });
      this.currentStep = report!.step + 1;
      return report!;
    } catch (cause) {
      throw named(cause, `training step ${this.currentStep + 1} failed`);
    }
  }

  async save(file: string): Promise<void> {
    try {
      await this.world.call("save", [file], { what: `saving ${file}` });
    } catch (cause) {
      throw named(cause, `saving ${file} failed`);
    }
  }

  /** World rank 0's parameters (the driver exports them). */
  async weights(): Promise<Float32Array> {
    const leader = this.world.leader();
    if (leader === null) throw new TrainerError("weights: world rank 0 lives in another process");
    return leader.weights();
  }

  /** Every token's log-probability under the model (each rank scores its shard; world rank 0's answer holds them all). */
  async score(tokens: Int32Array): Promise<TokenScores> {
    try {
      const [scores] = await this.world.call("score", [tokens], { what: `scoring ${tokens.length} tokens`, watchdog: true });
      return scores!;
    } catch (cause) {
      throw named(cause, `scoring ${tokens.length} tokens failed`);
    }
  }

  /** Releases every rank's sessions, then stops the ranks (stuck worker threads are terminated). */
  async close(): Promise<void> {
    await this.world.close("close");
  }
}
