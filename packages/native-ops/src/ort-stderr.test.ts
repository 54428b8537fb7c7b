/**
 * A passing test suite prints no ONNX Runtime error lines: sessions of every
 * kind the suite creates, and the negative cases it runs (a bad feed, bytes
 * that are no model, the CUDA provider asked for without its binaries), leave
 * no "[E:" or "[W:" line (ONNX Runtime's log format) on stderr, the errors
 * reaching the caller as exceptions instead. Runs the fixture in a child
 * process: ONNX Runtime writes its log from native code, past vitest.
 */
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { fusedAttentionStatus } from "./index.js";

const fixture = join(dirname(fileURLToPath(import.meta.url)), "testing-fixtures", "ort-quiet-runs.ts");
const status = fusedAttentionStatus();

describe.skipIf(!status.available)(`ONNX Runtime's log on stderr${status.available ? "" : ` (skipped: ${status.reason.split("\n")[0]})`}`, () => {
  it("holds no error or warning line after the suite's kinds of session and its negative cases", () => {
    const run = spawnSync(process.execPath, ["--conditions=@ulysses/source", "--import", "tsx", fixture], {
      encoding: "utf8",
      env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" },
      timeout: 60_000,
    });
    const context = `exit ${run.status}\nstdout:\n${run.stdout}\nstderr:\n${run.stderr}`;
    expect(run.status, context).toBe(0);
    const lines = run.stdout.trim().split("\n");
    expect(lines.at(-1), context).toBe("done");
    // the negative cases ran and failed as errors: 2 per session cache, and the CUDA provider
    expect(
      lines.filter((l) => l.startsWith("expected: ")),
      context,
    ).toHaveLength(5);
    expect(
      run.stderr.split("\n").filter((l) => /\[[EW]:onnxruntime/.test(l)),
      context,
    ).toEqual([]);
  }, 90_000);
});
