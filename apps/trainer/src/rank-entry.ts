/**
 * The worker-thread entry of the threads launcher: each rank's setup builds
 * its RankTrainer on the world group the launcher gives it and serves the
 * methods the driver calls (`launched.all(...)`). Nothing here differs from
 * what an mpirun rank does; this file only adapts RankTrainer to `launch`.
 */
import type { RankContext } from "@ulysses/collectives";
import type { TrainConfig } from "./config.js";
import type { RunPlan } from "./plan.js";
import { RankTrainer, type RankStepReport } from "./rank-trainer.js";

export interface RankEntryArgs {
  config: TrainConfig;
  plan: RunPlan;
  resumeFile: string | null;
  /** Modules that install rank hooks (rankHookModules of the driver's thread), imported here first. */
  hookModules?: string[];
}

export interface RankApi {
  description(): Promise<string>;
  step(): Promise<number>;
  runStep(): Promise<RankStepReport>;
  save(file: string): Promise<void>;
  weights(): Promise<Float32Array>;
  close(): Promise<void>;
}

export default async function setup(ctx: RankContext<RankEntryArgs>): Promise<RankApi> {
  process.env.ORT_DISABLE_TELEMETRY = "1";
  const { config, plan, resumeFile } = ctx.args;
  for (const module of ctx.args.hookModules ?? []) await import(module);
  const trainer = await RankTrainer.create({
    world: ctx.group,
    config: { ...config, threads: config.threads ?? ctx.ortThreads },
    plan,
    ranksInProcess: ctx.worldSize,
    resumeFile,
  });
  return {
    description: async () => trainer.description,
    step: async () => trainer.step,
    runStep: () => trainer.runStep(),
    save: (file) => trainer.save(file),
    weights: async () => trainer.weights(),
    close: () => trainer.close(),
  };
}
