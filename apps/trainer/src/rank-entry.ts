/**
 * The entry every rank runs, whatever the backend (the collectives'
 * `startRanks`: a worker thread, this thread, or an mpirun process): its
 * setup builds the rank's RankTrainer on the world group it is given and
 * serves the methods the driver's RankPool calls.
 */
import type { RankContext } from "@ulysses/collectives";
import { processSharedFloats } from "@ulysses/native-ops";
import type { TokenScores } from "@ulysses/training";
import type { TrainConfig } from "./config.js";
import type { RunPlan } from "./plan.js";
import { RankTrainer, type RankStepReport } from "./rank-trainer.js";

export interface RankEntryArgs {
  config: TrainConfig;
  plan: RunPlan;
  resumeFile: string | null;
  /** Modules that install rank hooks (rankHookModules of the driver's thread), imported here first. */
  hookModules?: string[];
  /** --shared-weights: the process-wide memory of the one copy of the weights every rank reads. */
  sharedWeights?: SharedWeights;
}

/** The name and length (float32 elements) of a run's process-wide weights (@ulysses/native-ops' processSharedFloats). */
export interface SharedWeights {
  name: string;
  length: number;
}

export interface RankApi {
  description(): Promise<string>;
  step(): Promise<number>;
  runStep(): Promise<RankStepReport>;
  save(file: string): Promise<void>;
  weights(): Promise<Float32Array>;
  score(tokens: Int32Array): Promise<TokenScores>;
  close(): Promise<void>;
}

export default async function setup(ctx: RankContext<RankEntryArgs>): Promise<RankApi> {
  process.env.ORT_DISABLE_TELEMETRY = "1";
  const { config, plan, resumeFile } = ctx.args;
  for (const module of ctx.args.hookModules ?? []) await import(module);
  const trainer = await RankTrainer.create({
    world: ctx.group,
    config,
    plan,
    threads: config.threads ?? ctx.ortThreads,
    resumeFile,
    ...(ctx.args.sharedWeights !== undefined ? { sharedValues: processSharedFloats(ctx.args.sharedWeights.name, ctx.args.sharedWeights.length) } : {}),
  });
  return {
    description: async () => trainer.description,
    step: async () => trainer.step,
    runStep: () => trainer.runStep(),
    save: (file) => trainer.save(file),
    weights: async () => trainer.weights(),
    score: (tokens) => trainer.score(tokens),
    close: () => trainer.close(),
  };
}
