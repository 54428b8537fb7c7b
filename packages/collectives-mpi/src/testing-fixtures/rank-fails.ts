/**
 * Runs on every rank under mpirun (see ../failures.test.ts) to show how a job
 * ends when a rank fails. Argument:
 * - "throw": the last rank throws an uncaught error while the others wait in
 *   an allReduce; the job must end at once, non-zero, naming that rank.
 * - "timeout": the last rank sleeps instead of calling a barrier; the others
 *   reject after the 500 ms timeout, exit 1, and the job ends.
 */
import { mpiBackend } from "../index.js";

const mode = process.argv[2];
const world = await mpiBackend({ timeoutMs: mode === "timeout" ? 500 : 60_000 });
const last = world.size - 1;
await world.barrier();
if (world.rank === last) {
  if (mode === "throw") throw new Error(`deliberate failure on rank ${world.rank}`);
  await new Promise((resolve) => setTimeout(resolve, 30_000));
} else if (mode === "throw") {
  await world.allReduce(new Float32Array(16));
} else {
  await world.barrier();
}
console.log(`rank ${world.rank} finished without noticing the failure`);
