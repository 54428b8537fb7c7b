/**
 * The fault injector of the trainer's failure tests, as rank hooks
 * (RankHooks of rank-trainer.ts). Loaded with `node --import` before the CLI
 * (testing-fixtures/cli.ts adds it when a test sets one of the variables
 * below); worker threads inherit the flag, so every rank installs it. Never
 * part of a real run: the published package does not ship this folder.
 *
 * - ULYSSES_TRAINER_FAIL="rank:step": that rank throws at the start of that step.
 * - ULYSSES_TRAINER_FAULT="kind:rank:step[:delayMs]": at the start of that
 *   step, that rank arms a timer; after delayMs (default 0) the fault hits
 *   wherever the rank then is (inside a kernel run, a collective, between ops):
 *   `error` throws an uncaught Error, `exit` calls process.exit(3) (ends a
 *   worker thread, or an mpirun process), `hang` spins forever on the rank's
 *   thread (a rank stuck in compute), `throw` throws from runStep at once,
 *   `hang-end` spins forever once the step's last collective is done (the
 *   peers finish the step and wait for nothing: only a watchdog notices),
 *   `kill-in-write` SIGKILLs the process inside the rank's next checkpoint
 *   write, its temporary written and flushed but not yet renamed over
 *   checkpoint.safetensors (a kill sent from outside when the temporary
 *   appears races the write: a small checkpoint is renamed within a
 *   millisecond). It wraps this thread's fs.renameSync, which the atomic
 *   write calls; nothing else renames onto that name.
 */
import fs from "node:fs";
import { TrainerError } from "../errors.js";
import { installRankHooks } from "../rank-trainer.js";

function injectFault(rank: number, step: number, atEnd: boolean): void {
  if (process.env.ULYSSES_TRAINER_FAIL === `${rank}:${step}`) throw new TrainerError(`injected failure (ULYSSES_TRAINER_FAIL=${rank}:${step})`);
  const spec = process.env.ULYSSES_TRAINER_FAULT;
  if (!spec) return;
  const [kind, r, s, delay] = spec.split(":");
  if (Number(r) !== rank || Number(s) !== step || atEnd !== (kind === "hang-end")) return;
  const delayMs = Number(delay ?? 0) || 0;
  const what = `injected ${kind} (ULYSSES_TRAINER_FAULT=${spec})`;
  // The marker tells a test when the fault hit (epoch ms).
  const mark = () => process.stderr.write(`fault: ${what} on rank ${rank} at ${Date.now()}\n`);
  switch (kind) {
    case "throw":
      mark();
      throw new TrainerError(what);
    case "error":
      setTimeout(() => {
        mark();
        throw new Error(what);
      }, delayMs);
      return;
    case "exit":
      setTimeout(() => {
        mark();
        process.exit(3);
      }, delayMs);
      return;
    case "kill-in-write": {
      const rename = fs.renameSync;
      fs.renameSync = (from, to) => {
        if (String(to).endsWith("checkpoint.safetensors") && String(from).includes(".tmp-")) {
          mark();
          process.kill(process.pid, "SIGKILL");
        }
        rename(from, to);
      };
      return;
    }
    case "hang-end":
      mark();
      for (;;) {
        // stuck in compute after the step's collectives
      }
    case "hang":
      setTimeout(() => {
        mark();
        for (;;) {
          // stuck in compute: never yields to the event loop
        }
      }, delayMs);
      return;
    default:
      throw new TrainerError(`ULYSSES_TRAINER_FAULT=${spec}: kind must be throw, error, exit, hang, hang-end or kill-in-write`);
  }
}

installRankHooks(
  {
    stepStart: (rank, step) => injectFault(rank, step, false),
    stepEnd: (rank, step) => injectFault(rank, step, true),
  },
  import.meta.url,
);
