// Type-checked only (tsc --noEmit, strict, no skipLibCheck): every package's
// public types as a TypeScript user sees them from the installed tarballs.
import { ParallelDims, UlyssesAttention, parallelize, type ShardedAttention } from "@ulysses/parallel";
import { CollectiveError, launch, type LaunchedWorld, type ProcessGroup } from "@ulysses/collectives";
import { runConformance, type CheckResult } from "@ulysses/collectives/testing";
import { CALLER_THREAD_MAX_PAIRS, FusedAttention, nativeRateCache, type FusedAttentionOptions } from "@ulysses/native-ops";
import { fastestRound, measureMatmulRate, type MatmulRateOptions, type RateCache, type RoundOptions } from "@ulysses/measure";
import { GraphBuilder, OrtAttention, SessionCache, createOrtOps, type AttentionOptions, type LocalAttention } from "@ulysses/kernels";
import * as model from "@ulysses/model";
import { Trainer, type TrainModel } from "@ulysses/training";
import { Tensor, narrow, type DType } from "@ulysses/tensors";

const dtype: DType = "float32";
const x: Tensor<"float32"> = Tensor.zeros(dtype as "float32", [2, 4]);
const half: Tensor<"float32"> = narrow(x, 1, 0, 2);
const cache = new SessionCache({ intraOpThreads: 1 });
const local: LocalAttention = new OrtAttention({ cache });
const options: FusedAttentionOptions = { threads: 1, callerThreadMaxPairs: CALLER_THREAD_MAX_PAIRS };
const onThisThread: AttentionOptions = { causal: true, onCallerThread: true };

export async function wrap(group: ProcessGroup): Promise<ShardedAttention> {
  const results: CheckResult[] = await runConformance(group);
  if (results.some((r) => r.status === "failed")) throw new CollectiveError("conformance failed");
  return new UlyssesAttention(local, group);
}

export async function start(): Promise<LaunchedWorld<{ ping(): Promise<number> }>> {
  return launch<{ ping(): Promise<number> }>({ worldSize: 2, entry: new URL("./rank.mjs", import.meta.url) });
}

/** The one-device model, parallelised from outside, in a trainer. */
export async function trainer(world: ProcessGroup, config: model.GptConfig): Promise<Trainer> {
  const ops = createOrtOps(cache);
  const dims = await ParallelDims.create(world, { sp: world.size }, { heads: config.heads, kvHeads: config.kvHeads, seqLength: config.maxSeq });
  const parallel: TrainModel = parallelize(new model.Gpt(config, { ops, localAttention: local, seed: 0 }), dims);
  return new Trainer(parallel, { ops, gradClip: 1, adamw: { weightDecay: 0.1 }, zero: 0 });
}

/** The MatMul rate over sustained rounds, and a kernel timed by the same rule. */
export async function rates(kernel: () => Promise<unknown>): Promise<{ flops: number; seconds: number }> {
  // on ONNX Runtime's kernel alone: the addon's cache, each output given back
  const onKernel = (settings: { intraOpThreads: number; allowSpinning: boolean }): RateCache => nativeRateCache(settings);
  const rateOptions: MatmulRateOptions = { threads: 1, rounds: 2, minRoundMs: 100, cache: onKernel };
  const rounds: RoundOptions = { minRoundMs: rateOptions.minRoundMs ?? 0, now: () => performance.now() };
  return { flops: await measureMatmulRate(rateOptions), seconds: await fastestRound(kernel, 2, 1, rounds) };
}

export const used = [half, options, onThisThread, GraphBuilder, FusedAttention, Object.keys(model).length];
