/**
 * Run as its own process (node --import tsx first-session-race.ts WORKERS):
 * WORKERS threads create their first FusedAttention session at the same
 * moment, the process's first use of the custom-op domain. Prints one JSON
 * line: how many succeeded and the errors of the others.
 */
import { Worker } from "node:worker_threads";

process.env.ORT_DISABLE_TELEMETRY = "1";
const count = Number(process.argv.at(-1));
const workerFile = new URL("./first-session-worker.ts", import.meta.url);
const bootstrap = `import("tsx/esm/api").then((tsx) => { tsx.register(); return import(${JSON.stringify(workerFile.href)}); });`;
const gate = new Int32Array(new SharedArrayBuffer(8));
const results = Array.from(
  { length: count },
  () =>
    new Promise<{ ok: boolean; message?: string }>((resolve) => {
      const worker = new Worker(bootstrap, {
        eval: true,
        workerData: { gate },
        execArgv: ["--conditions=@ulysses/source", "--import", "tsx"],
        env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" },
      });
      let result: { ok: boolean; message?: string } | undefined;
      worker.on("message", (m: { ok: boolean; message?: string }) => (result = m));
      worker.on("error", (e) => (result = { ok: false, message: e.message }));
      worker.on("exit", (code) => resolve(result ?? { ok: false, message: `worker exited with code ${code} without a result` }));
    }),
);
while (Atomics.load(gate, 1) < count) await new Promise((r) => setTimeout(r, 5));
Atomics.store(gate, 0, 1);
Atomics.notify(gate, 0);
const all = await Promise.all(results);
console.log(JSON.stringify({ ok: all.filter((r) => r.ok).length, errors: all.filter((r) => !r.ok).map((r) => r.message) }));
