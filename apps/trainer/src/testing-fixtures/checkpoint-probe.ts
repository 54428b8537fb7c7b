/**
 * A fresh process that measures one checkpoint refusal (checkpoint-bombs.test.ts):
 * `cli ARGS...` runs the CLI's main(ARGS), `rank FILE` starts the ranks of a
 * tiny recall run (hidden 16, as tinyFlags) resuming FILE, the way the CLI
 * starts them after its checks (a file replaced since then meets only this). Everything is imported
 * first; then the resident size and the clock are read before the call, the
 * peak resident size (the kernel's maxRSS) and the clock after it, and one line `PROBE {json}` reports the
 * exit code, the growth of the peak, the time and the error text. A watchdog
 * thread samples the RSS and kills the process (SIGKILL) when it grows by more
 * than 1.5 GB or the call runs past 30 s, so a memory bomb that is not
 * refused ends the probe instead of the machine.
 */
import { Worker } from "node:worker_threads";
import { main } from "../cli.js";
import { DEFAULTS } from "../config.js";
import { RankPool } from "../rank-pool.js";

const WATCHDOG = `
const { workerData } = require("node:worker_threads");
const started = Date.now();
setInterval(() => {
  if (process.memoryUsage.rss() > workerData.limit || Date.now() - started > 30000) process.kill(process.pid, "SIGKILL");
}, 5);
`;

const [mode, ...rest] = process.argv.slice(2);
process.env.ORT_DISABLE_TELEMETRY = "1";
const watchdog = new Worker(WATCHDOG, { eval: true, workerData: { limit: process.memoryUsage.rss() + 1.5e9 } });
watchdog.unref();
const written: string[] = [];
const realWrite = process.stderr.write.bind(process.stderr);
const realStdout = process.stdout.write.bind(process.stdout);
// the resident size now (not the peak of the imports, which may lie above it): the growth reported is an upper bound
const rssBefore = process.memoryUsage.rss();
const started = performance.now();
let code: number;
if (mode === "cli") {
  process.stderr.write = ((chunk: string | Uint8Array) => {
    written.push(String(chunk));
    return true;
  }) as typeof process.stderr.write;
  process.stdout.write = (() => true) as typeof process.stdout.write;
  code = await main(rest);
  process.stderr.write = realWrite;
  process.stdout.write = realStdout;
} else {
  const config = { ...DEFAULTS, backend: "local", hidden: 16, heads: 2, kvHeads: 2, layers: 1, seq: 24, keys: 3, values: 4, threads: 1 };
  try {
    await RankPool.start({ ...config, backend: "local" }, rest[0]!);
    code = 0;
  } catch (error) {
    written.push((error as Error).message);
    code = 2;
  }
}
const ms = performance.now() - started;
const growthBytes = process.resourceUsage().maxRSS * 1024 - rssBefore;
realStdout(`PROBE ${JSON.stringify({ code, growthBytes, ms, stderr: written.join("") })}\n`);
process.stdout.write("", () => process.exit(0));
