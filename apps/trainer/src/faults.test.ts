/**
 * The fault-injection suite (`pnpm test:faults`; not part of `pnpm test`: it
 * spawns about 50 trainer processes). Every case runs the CLI on a tiny model
 * with a fault injected by ULYSSES_TRAINER_FAULT (testing-fixtures/fault-injector.ts) at a
 * moment drawn from a seeded generator; the seed and the moment are in each
 * test's name, so a failing trial reruns alone with `-t "seed 7:"`.
 *
 * - Rank death (process.exit in the rank, an uncaught error) with the fused
 *   and the ORT attention kernel at SP 2 and 4: exit 1 naming the rank and
 *   the cause within 10 s of the fault, never an abort.
 * - A rank stuck in compute, before a collective (its peers' collective times
 *   out) and after the step's last one (only the watchdog notices): named
 *   within the configured timeout (5 s) plus a second.
 * - A rank hung in a busy loop under every attention scheme (ulysses, ring,
 *   hybrid, allgather) and both kernels at SP 4, and ring/hybrid again beside
 *   two busy processes: named within --timeout plus 5 s (a run that hangs is
 *   killed after a minute, failing its trial).
 * - kill -9 inside checkpoint writes (ULYSSES_TRAINER_FAULT=kill-in-write) and
 *   at random moments of a run that checkpoints every step, resumed each
 *   time: the final checkpoint holds exactly the uninterrupted run's data.
 */
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { seededRandom } from "@ulysses/kernels/testing";
import { readSafetensors } from "@ulysses/model";
import { type SpawnOptions, type Spawned, spawnTrainer, tinyFlags } from "./testing-fixtures/cli.js";

const tiny = [...tinyFlags(4), "--log-every", "1", "--no-export"];
const TIMEOUT_S = 5;
const timeoutFlags = ["--timeout", String(TIMEOUT_S)];
/** Trials run two at a time (the machines running this have 2 cores). */
const CONCURRENCY = 2;

function cli(args: string[], env: Record<string, string> = {}, onStdout?: SpawnOptions["onStdout"]): Promise<Spawned> {
  return spawnTrainer(args, { env, onStdout });
}

/** At most CONCURRENCY trainer processes at once, across all tests of this file. */
let running = 0;
const queue: (() => void)[] = [];
async function slot<T>(fn: () => Promise<T>): Promise<T> {
  if (running >= CONCURRENCY) await new Promise<void>((go) => queue.push(go));
  running++;
  try {
    return await fn();
  } finally {
    running--;
    queue.shift()?.();
  }
}

/** The "random" moments, reproducible from the seed in the test name. */
const rng = seededRandom;

/** When the fault hit (the injector's marker on stderr: "fault: ... at <epoch ms>"). */
function faultTime(stderr: string): number | null {
  const match = /^fault: .* at (\d{13})$/m.exec(stderr);
  return match ? Number(match[1]) : null;
}

/** One row per trial, printed at the end by case: exit codes, the ms from the fault to the exit (min, median, max), an error line. */
const table: { group: string; code: number | null; message: string; ms: number }[] = [];
function record(group: string, run: Spawned, hit: number | null): void {
  const message = /^error: .*$/m.exec(run.stderr)?.[0] ?? /terminate called.*$/m.exec(run.stderr)?.[0] ?? "";
  table.push({ group, code: run.code, message, ms: hit === null ? NaN : run.exitedAt - hit });
}
afterAll(() => {
  const groups = new Map<string, typeof table>();
  for (const row of table) groups.set(row.group, [...(groups.get(row.group) ?? []), row]);
  const lines = [...groups].map(([group, rows]) => {
    const codes = [...new Set(rows.map((r) => r.code))].join("/");
    const ms = rows.map((r) => r.ms).sort((a, b) => a - b);
    const median = ms[Math.floor((ms.length - 1) / 2)];
    return `${group} | ${rows.length} trials | exit ${codes} | ms to exit: min ${ms[0]}, median ${median}, max ${ms.at(-1)} | e.g. ${rows[0]!.message}`;
  });
  if (lines.length > 0) console.log(`fault table:\n${lines.join("\n")}`);
});

const tmp = (prefix: string) => fs.mkdtempSync(path.join(os.tmpdir(), prefix));

interface DeathTrial {
  name: string;
  kernel: "fused" | "ort";
  kind: "exit" | "error";
  sp: 2 | 4;
  rank: number;
  step: number;
  delayMs: number;
}

/** 20 trials per kernel: exit and error, SP 2 and 4, five of each; rank, step (0-based) and delay from the seed. */
function deathTrials(kernel: "fused" | "ort", firstSeed: number): DeathTrial[] {
  return Array.from({ length: 20 }, (_, i) => {
    const seed = firstSeed + i;
    const random = rng(seed);
    const kind = i % 2 === 0 ? "exit" : "error";
    const sp = i % 4 < 2 ? 2 : 4;
    const rank = Math.floor(random() * sp);
    const step = 1 + Math.floor(random() * 2);
    const delayMs = Math.floor(random() * 80);
    return {
      name: `seed ${seed}: ${kind} on rank ${rank} ${delayMs} ms into step ${step + 1}, sp ${sp}, ${kernel} kernel`,
      kernel,
      kind,
      sp,
      rank,
      step,
      delayMs,
    };
  });
}

const CAUSE = { exit: "exited with code 3", error: "failed: Error: injected error" } as const;

describe("rank death: exit 1 naming the rank and the cause within 10 s", () => {
  for (const [kernel, firstSeed] of [
    ["fused", 1],
    ["ort", 101],
  ] as const) {
    describe(`${kernel} kernel`, () => {
      for (const trial of deathTrials(kernel, firstSeed)) {
        it.concurrent(
          trial.name,
          () =>
            slot(async () => {
              const out = path.join(tmp("fault-"), "run");
              const spec = `${trial.kind}:${trial.rank}:${trial.step}:${trial.delayMs}`;
              // far more steps than the fault needs (a tiny step takes milliseconds): the fault always lands mid-run
              const run = await cli([...tiny, "--sp", String(trial.sp), "--kernel", kernel, "--steps", "400", "--checkpoint-every", "0", "--out", out], {
                ULYSSES_TRAINER_FAULT: spec,
              });
              const hit = faultTime(run.stderr);
              record(`${trial.kind}, ${kernel}, sp ${trial.sp}`, run, hit);
              expect(hit, `the fault never fired:\n${run.stderr}`).not.toBeNull();
              expect(run.stderr).not.toMatch(/terminate called|Napi::Error/);
              expect({ code: run.code, signal: run.signal }, run.stderr).toEqual({ code: 1, signal: null });
              expect(run.stderr).toMatch(new RegExp(`^error: .*rank ${trial.rank} ${CAUSE[trial.kind]}`, "m"));
              expect(run.exitedAt - hit!, "ms from the fault to the exit").toBeLessThanOrEqual(10_000);
              fs.rmSync(path.dirname(out), { recursive: true, force: true });
            }),
          120_000,
        );
      }
    });
  }
});

describe(`a rank stuck in compute is named within the timeout (--timeout ${TIMEOUT_S})`, () => {
  const cases = [
    // before a collective: the peers' collective times out naming it
    { kind: "hang", kernel: "fused", sp: 2, seed: 201 },
    { kind: "hang", kernel: "ort", sp: 4, seed: 202 },
    // after the step's last collective: the peers finish; the pool's watchdog names it
    { kind: "hang-end", kernel: "fused", sp: 4, seed: 203 },
    { kind: "hang-end", kernel: "ort", sp: 2, seed: 204 },
  ] as const;
  for (const c of cases) {
    const random = rng(c.seed);
    const rank = Math.floor(random() * c.sp);
    const step = 1 + Math.floor(random() * 2);
    const delayMs = c.kind === "hang" ? Math.floor(random() * 80) : 0;
    const when = c.kind === "hang" ? `${delayMs} ms into step ${step + 1}` : `at the end of step ${step + 1}`;
    it.concurrent(
      `seed ${c.seed}: ${c.kind} on rank ${rank} ${when}, sp ${c.sp}, ${c.kernel} kernel`,
      () =>
        slot(async () => {
          const out = path.join(tmp("stuck-"), "run");
          const spec = `${c.kind}:${rank}:${step}:${delayMs}`;
          const run = await cli(
            [...tiny, ...timeoutFlags, "--sp", String(c.sp), "--kernel", c.kernel, "--steps", "400", "--checkpoint-every", "0", "--out", out],
            { ULYSSES_TRAINER_FAULT: spec },
          );
          const hit = faultTime(run.stderr);
          record(`${c.kind}, ${c.kernel}, sp ${c.sp}`, run, hit);
          expect(hit, `the fault never fired:\n${run.stderr}`).not.toBeNull();
          expect({ code: run.code, signal: run.signal }, run.stderr).toEqual({ code: 1, signal: null });
          // (a delayed hang may land in a later step than the one it was armed in)
          expect(run.stderr).toMatch(
            new RegExp(
              `^error: .*rank ${rank} did not finish step ${c.kind === "hang" ? "\\d+" : step + 1} within ${TIMEOUT_S} s \\(stuck in compute\\?\\)`,
              "m",
            ),
          );
          const elapsed = run.exitedAt - hit!;
          expect(elapsed, "ms from the hang to the exit").toBeLessThanOrEqual(TIMEOUT_S * 1000 + 1500);
          fs.rmSync(path.dirname(out), { recursive: true, force: true });
        }),
      120_000,
    );
  }
});

/** The flags of `attention` at SP 4 (hybrid: Ulysses pairs, a ring of two). */
const schemeFlags = (attention: string) => ["--sp", "4", "--attention", attention, ...(attention === "hybrid" ? ["--ulysses-degree", "2"] : [])];

/** A run that neither names the hung rank nor exits is killed this long after its first output (its trial then fails). */
const HUNG_RUN_KILL_MS = 60_000;

/** One hung rank (a busy loop `delayMs` into step `step` + 1); the run must name it within --timeout plus 5 s. */
async function hungRankTrial(attention: string, kernel: "fused" | "ort", seed: number, group: string): Promise<void> {
  const random = rng(seed);
  const rank = Math.floor(random() * 4);
  const step = 1 + Math.floor(random() * 2);
  const delayMs = Math.floor(random() * 80);
  const out = path.join(tmp("hung-"), "run");
  let killer: ReturnType<typeof setTimeout> | undefined;
  const run = await cli(
    [...tiny, ...timeoutFlags, ...schemeFlags(attention), "--kernel", kernel, "--steps", "400", "--checkpoint-every", "0", "--out", out],
    { ULYSSES_TRAINER_FAULT: `hang:${rank}:${step}:${delayMs}` },
    (_, child) => {
      killer ??= setTimeout(() => child.kill("SIGKILL"), HUNG_RUN_KILL_MS);
    },
  );
  clearTimeout(killer);
  const hit = faultTime(run.stderr);
  record(group, run, hit);
  fs.rmSync(path.dirname(out), { recursive: true, force: true });
  const what = `seed ${seed}: rank ${rank} hung ${delayMs} ms into step ${step + 1}, ${attention}, ${kernel}`;
  expect(hit, `${what}: the fault never fired:\n${run.stderr}`).not.toBeNull();
  expect({ code: run.code, signal: run.signal }, `${what}:\n${run.stderr}`).toEqual({ code: 1, signal: null });
  expect(run.stderr, what).toMatch(new RegExp(`^error: .*rank ${rank} did not finish step \\d+ within ${TIMEOUT_S} s \\(stuck in compute\\?\\)`, "m"));
  expect(run.exitedAt - hit!, `${what}: ms from the hang to the exit`).toBeLessThanOrEqual((TIMEOUT_S + 5) * 1000);
}

describe(`a hung rank is named within --timeout + 5 s under every scheme and kernel at SP 4`, () => {
  const schemes = ["ulysses", "ring", "hybrid", "allgather"] as const;
  schemes.forEach((attention, i) => {
    for (const [j, kernel] of (["fused", "ort"] as const).entries()) {
      const seed = 401 + 2 * i + j;
      it.concurrent(
        `seed ${seed}: ${attention}, ${kernel} kernel`,
        () => slot(() => hungRankTrial(attention, kernel, seed, `hang, ${attention}, sp 4`)),
        120_000,
      );
    }
  });
});

describe("... and under an artificial load (two busy processes beside the run)", () => {
  it("seeds 411-416: ring and hybrid, both kernels, one trial at a time", async () => {
    // each busy process ends by itself within the test's time limit, and is killed when the test ends
    const busy = [0, 1].map(() => spawn(process.execPath, ["-e", "const end = Date.now() + 280000; while (Date.now() < end);"], { stdio: "ignore" }));
    try {
      const trials = [
        ["ring", "fused"],
        ["ring", "ort"],
        ["ring", "fused"],
        ["ring", "ort"],
        ["hybrid", "fused"],
        ["hybrid", "ort"],
      ] as const;
      for (const [i, [attention, kernel]] of trials.entries()) await hungRankTrial(attention, kernel, 411 + i, `hang under load, ${attention}, sp 4`);
    } finally {
      for (const child of busy) child.kill("SIGKILL");
    }
  }, 300_000);
});

describe("kill -9 during checkpoint writes, then resume", () => {
  it.concurrent(
    "seeds 301-306: six SIGKILLs (inside a checkpoint write, or at a random time) of a run checkpointing every step, each resumed; the final checkpoint equals the uninterrupted run's",
    () =>
      slot(async () => {
        const root = tmp("kill9-");
        // room for six kills: each run advances a few step lines plus at most 60 ms of steps before its kill (with
        // kills up to 400 ms late and 30 steps, one run reached step 28 and the last three finished unkilled)
        const steps = 80;
        const flags = [...tiny, "--steps", String(steps), "--warmup", "3", "--checkpoint-every", "1"];
        const whole = await cli([...flags, "--out", path.join(root, "whole")]);
        expect(whole.code, whole.stderr).toBe(0);

        const split = path.join(root, "split");
        const kills: string[] = [];
        let midWrite = 0;
        for (const seed of [301, 302, 303, 304, 305, 306]) {
          const random = rng(seed);
          const onTemporary = random() < 0.5;
          const afterLines = 1 + Math.floor(random() * 3);
          const delayMs = Math.floor(random() * 60);
          const resume = fs.existsSync(path.join(split, "checkpoint.safetensors"));
          const start = resume ? Number(readSafetensors(path.join(split, "checkpoint.safetensors")).metadata.step) : 0;
          // inside a write: the injector SIGKILLs rank 0 in the checkpoint write that follows step start + afterLines + 1,
          // its temporary flushed and not yet renamed (a kill sent from here when the temporary appears lands after
          // the rename more often than not: a small checkpoint is written within a millisecond)
          const inWrite = start + afterLines;
          let armed = false;
          const run = await cli(
            [...flags, ...(resume ? ["--resume", split] : ["--out", split])],
            onTemporary ? { ULYSSES_TRAINER_FAULT: `kill-in-write:0:${inWrite}` } : {},
            (text, child) => {
              const lines = text.match(/step \d+\/\d+/g)?.length ?? 0;
              // (only once a checkpoint exists, so that every kill leaves a run to resume)
              if (onTemporary || armed || lines < afterLines || !fs.existsSync(path.join(split, "checkpoint.safetensors"))) return;
              armed = true;
              setTimeout(() => child.kill("SIGKILL"), delayMs);
            },
          );
          if (onTemporary) expect(run.signal, `kill-in-write at step ${inWrite} did not kill the run:\n${run.stderr}`).toBe("SIGKILL");
          if (run.signal === "SIGKILL") {
            const step = readSafetensors(path.join(split, "checkpoint.safetensors")).metadata.step;
            const temporary = fs.readdirSync(split).some((f) => f.includes(".tmp"));
            if (onTemporary) {
              // the previous checkpoint stands, and the interrupted write's temporary is left behind
              expect(step).toBe(String(inWrite));
              expect(temporary).toBe(true);
            }
            if (temporary) midWrite++;
            kills.push(
              `seed ${seed}: ${onTemporary ? `inside the write after step ${inWrite + 1}` : `${delayMs} ms after ${afterLines} step line(s)`}, checkpoint at step ${step}${temporary ? ", temporary left" : ""}`,
            );
          } else {
            expect(run.code, run.stderr).toBe(0); // it finished before the kill landed
          }
        }
        // resume until done (the last kill may have left it anywhere)
        const last = await cli([...flags, "--resume", split]);
        expect(last.code, last.stderr).toBe(0);
        console.log(`kill -9: ${kills.length} of 6 runs killed, ${midWrite} inside a checkpoint write (its temporary left behind):\n${kills.join("\n")}`);
        expect(kills.length).toBeGreaterThanOrEqual(4);
        expect(midWrite).toBeGreaterThan(0);

        const a = readSafetensors(path.join(root, "whole", "checkpoint.safetensors"));
        const b = readSafetensors(path.join(split, "checkpoint.safetensors"));
        // The metadata (step, model config, RNG state, the run's plain settings) and every tensor byte are identical.
        expect(b.metadata).toEqual(a.metadata);
        expect(b.metadata.step).toBe(String(steps));
        expect([...b.tensors.keys()]).toEqual([...a.tensors.keys()]);
        for (const [name, t] of a.tensors) {
          const u = b.tensors.get(name)!;
          expect(
            Buffer.from(u.data.buffer, u.data.byteOffset, u.data.byteLength).equals(Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength)),
            name,
          ).toBe(true);
        }
        fs.rmSync(root, { recursive: true, force: true });
      }),
    300_000,
  );
});
