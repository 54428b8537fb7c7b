/**
 * A supervisor over a launched world: calls one method on every rank and
 * settles once every rank has answered, or as soon as the work cannot go on,
 * naming the rank to blame, whatever the others do. A rank stuck in compute
 * (JavaScript that never yields, a long native run) answers nothing and
 * misses no collective while it computes: the watchdog names it when its
 * peers have answered and it has not within the timeout. Ranks found stuck
 * are terminated at close instead of asked to stop.
 */
import { CollectiveError } from "../errors.js";
import type { LaunchedWorld, Method } from "./launch.js";

/**
 * After one rank's call fails (the world is then aborted, so every peer's
 * collectives reject at once), how long the others get to settle before the
 * ones still running are reported stuck.
 */
export const SETTLE_MS = 500;

const seconds = (ms: number) => `${+(ms / 1000).toFixed(3)} s`;
const list = (ranks: readonly number[]) => `rank${ranks.length === 1 ? "" : "s"} ${ranks.join(", ")}`;

export interface SuperviseOptions {
  /** What the call does, for a stuck rank's message ("rank 2 did not finish step 3 ..."; default the method's name). */
  what?: string;
  /** Run the watchdog (a call every rank answers in about the same time, like a training step). */
  watchdog?: boolean;
}

export class RankSupervisor<Api extends object> {
  /** Ranks that stopped answering (stuck in compute): close() terminates them instead of asking. */
  private readonly stuck = new Set<number>();

  /** `timeoutMs`: the world's collective timeout, also the watchdog's and close's bound on a silent rank. */
  constructor(
    readonly world: LaunchedWorld<Api>,
    private readonly timeoutMs: number,
  ) {}

  /** Ranks found stuck so far. */
  stuckRanks(): number[] {
    return [...this.stuck];
  }

  /**
   * Calls `method` on every rank; results in rank order. It rejects:
   * - when a rank fails (an error, its worker exited, a collective timed
   *   out): the world is aborted, so the others reject at once; SETTLE_MS
   *   later, the rank the failure blames (a collective timeout names the late
   *   rank), if it still has not answered, is stuck, and the error names it
   *   with the cause (other ranks still running are finishing an operation);
   * - with `watchdog`: when some ranks have answered and the others have not
   *   within the timeout (no collective of theirs is pending, so none times
   *   out), those are named stuck and the world aborted.
   */
  call<K extends keyof Api>(method: K, args: Method<Api, K>["args"], options: SuperviseOptions = {}): Promise<Method<Api, K>["result"][]> {
    type Result = Method<Api, K>["result"];
    const n = this.world.worldSize;
    const results: Result[] = new Array(n);
    const done: boolean[] = new Array(n).fill(false);
    const errors: { rank: number; error: unknown }[] = [];
    const what = options.what ?? String(method);
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
        return new CollectiveError(`${list(late)} did not finish ${what} within ${seconds(this.timeoutMs)} (stuck in compute?)${why}`);
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
          end(errors.length === 0 ? null : new CollectiveError(rootCause(), { cause: errors[0]!.error }));
        } else if (errors.length > 0) {
          arm("settle", SETTLE_MS, () => {
            const failure = this.world.failure();
            const cause = rootCause();
            const blamed = failure !== null && !done[failure.rank] ? failure.rank : null;
            end(blamed === null ? new CollectiveError(cause) : stuckError([blamed], `: ${cause}`));
          });
        } else if (options.watchdog === true) {
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
        const call = (this.world.rank(r) as unknown as Record<K, (...a: unknown[]) => Promise<Result>>)[method](...(args as unknown[]));
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

  /**
   * Calls `method` (the ranks' own release) on every answering rank, then
   * shuts the workers down; ranks found stuck, or silent for the timeout,
   * are terminated (they run JavaScript that never yields, or a native run,
   * which survives termination; see launch).
   */
  async close(method: keyof Api): Promise<void> {
    const answering = Array.from({ length: this.world.worldSize }, (_, r) => r).filter((r) => !this.stuck.has(r));
    await Promise.all(
      answering.map(async (r) => {
        let timer: ReturnType<typeof setTimeout> | undefined;
        const late = new Promise<"late">((done) => (timer = setTimeout(() => done("late"), this.timeoutMs)));
        const release = (this.world.rank(r) as unknown as Record<keyof Api, () => Promise<unknown>>)[method]();
        const answer = await Promise.race([release.catch(() => "failed" as const), late]);
        clearTimeout(timer);
        if (answer === "late") this.stuck.add(r);
      }),
    );
    await this.world.shutdown({ terminate: [...this.stuck] });
  }
}
