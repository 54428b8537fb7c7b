/**
 * Our custom-op sessions share the process, and a worker thread, with
 * onnxruntime-node's own sessions: one runtime library, both in use
 * alternately from one worker thread while the main thread runs too.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { Worker } from "node:worker_threads";
import { describe, expect, it } from "vitest";
import { maxRelativeError, referenceForward64 } from "@ulysses/kernels/testing";
import { Tensor } from "@ulysses/tensors";
import { FusedAttention, fusedAttentionStatus } from "./index.js";

const status = fusedAttentionStatus();
const suite = status.available ? "FusedAttention with onnxruntime-node" : `FusedAttention with onnxruntime-node (skipped: ${status.reason})`;

interface WorkerResult {
  results: { doubled: number[]; out: number[] }[];
  q: number[];
  k: number[];
}

// Node 20 applies no `--import tsx` hooks inside a worker: the bootstrap
// registers tsx's loader, then imports the TypeScript worker.
const workerFile = new URL("./testing-fixtures/interop-worker.ts", import.meta.url);
const bootstrap = `import("tsx/esm/api").then((tsx) => { tsx.register(); return import(${JSON.stringify(workerFile.href)}); });`;

function runWorker(rounds: number, shape: [number, number, number, number]): Promise<WorkerResult> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(bootstrap, {
      eval: true,
      workerData: { rounds, shape },
      execArgv: ["--conditions=@ulysses/source", "--import", "tsx"],
      env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" },
    });
    let result: WorkerResult | undefined;
    worker.on("message", (m: WorkerResult) => (result = m));
    worker.on("error", reject);
    worker.on("exit", (code) =>
      code === 0 && result ? resolve(result) : reject(new Error(`interop worker exited with code ${code} (result: ${result !== undefined})`)),
    );
  });
}

describe.skipIf(!status.available)(suite, () => {
  it("alternates an InferenceSession and the custom-op session in one worker thread", async () => {
    const shape: [number, number, number, number] = [1, 9, 2, 8];
    const main = new FusedAttention({ threads: 1 });
    try {
      const working = runWorker(4, shape);
      // The main thread uses the addon at the same time.
      const q = new Tensor(
        "float32",
        shape,
        Float32Array.from({ length: 144 }, (_, i) => Math.sin(i)),
      );
      const mainOut = await main.forward(q, q, q, { causal: true });
      const { results, q: qw, k: kw } = await working;
      expect(results).toHaveLength(4);
      const dims = { batch: 1, seqQ: 9, seqK: 9, heads: 2, kvHeads: 2, headDim: 8, group: 1, scale: 1 / Math.sqrt(8), offset: 0 };
      results.forEach(({ doubled, out }, r) => {
        expect(doubled).toEqual([-6, -4, -2, 0, 2, 4, 6, 8]);
        const want = referenceForward64(Float64Array.from(qw), Float64Array.from(kw), Float64Array.from(kw), { ...dims, causal: r % 2 === 0 }).out;
        expect(maxRelativeError(new Tensor("float32", shape, Float32Array.from(out)), new Tensor("float64", shape, want))).toBeLessThanOrEqual(1e-5);
      });
      const wantMain = referenceForward64(Float64Array.from(q.data), Float64Array.from(q.data), Float64Array.from(q.data), { ...dims, causal: true }).out;
      expect(maxRelativeError(mainOut.out, new Tensor("float64", shape, wantMain))).toBeLessThanOrEqual(1e-5);
    } finally {
      main.release();
    }
  });

  it("worker threads making the process's first custom-op sessions at the same moment all succeed", async () => {
    // ONNX Runtime's first registration of a custom-op domain is not
    // thread-safe; before the addon serialised session creation, 8 threads
    // starting together failed about one process in five ("the domain is
    // already exist"). A fresh process each time: only the first sessions race.
    const script = new URL("./testing-fixtures/first-session-race.ts", import.meta.url).pathname;
    for (let run = 0; run < 4; run++) {
      const { stdout } = await promisify(execFile)(process.execPath, ["--conditions=@ulysses/source", "--import", "tsx", script, "8"], {
        env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" },
      });
      expect(JSON.parse(stdout.trim().split("\n").at(-1)!)).toEqual({ ok: 8, errors: [] });
    }
  }, 120_000);
});
