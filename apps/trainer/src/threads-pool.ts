/**
 * A RankPool over worker threads started by the collectives' `launch`: every
 * call runs on all ranks (`launched.all`), whose rejection names the failed
 * rank; close() releases each rank's sessions, then shuts the workers down
 * (never terminating one inside an ONNX Runtime run).
 */
import { launch, type LaunchedWorld } from "@ulysses/collectives";
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

/**
 * After one rank's call fails (the world is then aborted, so every peer's
 * collectives reject at once), how long the others get to settle before the
 * ones still running are reported stuck.
 */
const SETTLE_MS = 500;

function named(cause: unknown, what: string): TrainerError {
  return new TrainerError(`${what}: ${(cause as Error).message ?? String(cause)}`, { cause });
}

const seconds = (ms: number) => `${+(ms / 1000).toFixed(3)} s`;
const list = (ranks: readonly number[]) => `rank${ranks.length === 1 ? "" : "s"} ${ranks.join(", ")}`;

export class ThreadsPool implements RankPool {
  /** Ranks that stopped answering (stuck in compute): close() terminates them instead of asking. */
  private readonly stuck = new Set<number>();

  private constructor(
    private readonly world: LaunchedWorld<RankApi>,
    readonly description: string,
    private currentStep: number,
    private readonly timeoutMs: number,
  ) {}

  static async start(config: TrainConfig, resumeFile: string | null, plan: RunPlan = planRun(config)): Promise<ThreadsPool> {
    const worldSize = plan.sp * plan.dp;
    const args: RankEntryArgs = { config, plan, resumeFile, hookModules: rankHookModules() };
    const timeoutMs = collectiveTimeoutMs(config);
    let world: LaunchedWorld<RankApi>;
    try {
      world = await launch<RankApi, RankEntryArgs>({
        worldSize,
        entry: ENTRY,
        typescript: FROM_SOURCE,
        args,
        timeoutMs,
        ...(config.threads !== null ? { ortThreadsPerRank: config.threads } : {}),
      });
    } catch (cause) {
      throw named(cause, `starting ${worldSize} ranks on worker threads failed`);
    }
    const pool = new ThreadsPool(world, "", 0, timeoutMs);
    try {
      const [description] = await pool.everyRank("description", null);
      const [step] = await pool.everyRank("step", null);
      return new ThreadsPool(world, description!, step!, timeoutMs);
    } catch (cause) {
      await pool.close();
      throw named(cause, `starting ${worldSize} ranks on worker threads failed`);
    }
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

  /**
   * Calls `method` on every rank and settles once every rank has answered,
   * or as soon as the run cannot go on, whatever the others do:
   * - a rank fails (an error, its worker exited, a collective timed out):
   *   the world is aborted, so the others reject at once; SETTLE_MS later, the
   *   rank the failure blames (a collective timeout names the late rank), if
   *   it has still not answered, is stuck, and the error names it with the
   *   cause (other ranks still running are finishing an operation);
   * - `watchStep` given: when some ranks have finished that step and the others
   *   have not within the collective timeout (no collective of theirs is
   *   pending, so none times out), those are named stuck and the world aborted.
   */
  private everyRank<K extends keyof RankApi>(method: K, watchStep: number | null, ...args: Parameters<RankApi[K]>): Promise<Awaited<ReturnType<RankApi[K]>>[]> {
    type Result = Awaited<ReturnType<RankApi[K]>>;
    const n = this.world.worldSize;
    const results: Result[] = new Array(n);
    const done: boolean[] = new Array(n).fill(false);
    const errors: { rank: number; error: unknown }[] = [];
    return new Promise<Result[]>((resolve, reject) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      let timerKind: "settle" | "watchdog" | null = null;
      let finished = false;
      const pending = () => done.flatMap((d, r) => (d ? [] : [r]));
      const end = (error: Error | null) => {
        if (finished) return;
        finished = true;
        clearTimeout(timer);
        if (error === null) resolve(results);
        else reject(error);
      };
      const rootCause = (): string => {
        const failure = this.world.failure();
        if (failure !== null) return failure.reason;
        const first = errors.find((e) => e.rank >= 0) ?? errors[0]!;
        return `rank ${first.rank}: ${(first.error as Error)?.message ?? String(first.error)}`;
      };
      const stuckError = (late: number[], why: string) => {
        for (const r of late) this.stuck.add(r);
        return new TrainerError(
          `${list(late)} did not finish step ${(watchStep ?? this.currentStep) + 1} within ${seconds(this.timeoutMs)} (stuck in compute?)${why}`,
        );
      };
      const arm = (kind: "settle" | "watchdog", ms: number, onFire: () => void) => {
        if (timerKind === "settle" || timerKind === kind) return;
        clearTimeout(timer);
        timerKind = kind;
        timer = setTimeout(onFire, ms);
      };
      const settled = () => {
        if (finished) return;
        const late = pending();
        if (late.length === 0) {
          end(errors.length === 0 ? null : new TrainerError(rootCause(), { cause: errors[0]!.error }));
        } else if (errors.length > 0) {
          arm("settle", SETTLE_MS, () => {
            const failure = this.world.failure();
            const cause = rootCause();
            // The rank the world's failure blames (a collective timeout names
            // the late rank) and that still has not answered is stuck; other
            // ranks still running are finishing an operation and stop by themselves.
            const blamed = failure !== null && !done[failure.rank] ? failure.rank : null;
            end(blamed === null ? new TrainerError(cause) : stuckError([blamed], `: ${cause}`));
          });
        } else if (watchStep !== null) {
          arm("watchdog", this.timeoutMs, () => {
            const stillLate = pending();
            if (stillLate.length === 0) return;
            const error = stuckError(stillLate, ` (${list(done.flatMap((d, r) => (d ? [r] : [])))} finished it)`);
            this.world.abort(stillLate[0]!, error.message);
            end(error);
          });
        }
      };
      for (let r = 0; r < n; r++) {
        const call = (this.world.rank(r) as unknown as Record<K, (...a: unknown[]) => Promise<Result>>)[method](...args);
        call.then(
          (value) => {
            results[r] = value;
            done[r] = true;
            settled();
          },
          (error: unknown) => {
            errors.push({ rank: r, error });
            done[r] = true;
            settled();
          },
        );
      }
    });
  }

  async runStep(): Promise<RankStepReport> {
    try {
      const [report] = await this.everyRank("runStep", this.currentStep);
      this.currentStep = report!.step + 1;
      return report!;
    } catch (cause) {
      throw named(cause, `training step ${this.currentStep + 1} failed`);
    }
  }

  async save(file: string): Promise<void> {
    try {
      await this.everyRank("save", null, file);
    } catch (cause) {
      throw named(cause, `saving ${file} failed`);
    }
  }

  async weights(): Promise<Float32Array> {
    return this.world.rank(0).weights() as Promise<Float32Array>;
  }

  /**
   * Releases every answering rank's sessions, then shuts the workers down;
   * ranks found stuck are terminated (they run JavaScript that never yields,
   * or a run of our fused kernel, which survives termination; see launch).
   */
  async close(): Promise<void> {
    const answering = Array.from({ length: this.world.worldSize }, (_, r) => r).filter((r) => !this.stuck.has(r));
    // bounded: a rank that does not answer within the collective timeout is stuck too (it never yields)
    await Promise.all(
      answering.map(async (r) => {
        let timer: ReturnType<typeof setTimeout> | undefined;
        const late = new Promise<"late">((done) => (timer = setTimeout(() => done("late"), this.timeoutMs)));
        const answer = await Promise.race([
          this.world
            .rank(r)
            .close()
            .catch(() => "failed" as const),
          late,
        ]);
        clearTimeout(timer);
        if (answer === "late") this.stuck.add(r);
      }),
    );
    await this.world.shutdown({ terminate: [...this.stuck] });
  }
}
