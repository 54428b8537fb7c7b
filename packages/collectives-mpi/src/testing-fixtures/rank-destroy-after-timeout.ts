/**
 * Runs on every rank under mpirun (see ../mpi-backend.test.ts): the last rank
 * never calls a barrier, so the others time out (500 ms) with the native
 * operation still pending; then every rank destroys its groups and exits.
 * The job must end without a native crash: the timed-out ranks print the
 * timeout and the abort line naming them, and the job exits non-zero.
 * Arguments: "world" (the barrier is on the world group) or "sub" (on a
 * sub-group of every rank, destroyed before the world); then "exit" to end
 * with process.exit(0) instead of letting the event loop drain.
 */
import { mpiBackend } from "../index.js";

const mode = process.argv[2] ?? "world";
const world = await mpiBackend({ timeoutMs: 500 });
const last = world.size - 1;
const group = mode === "sub" ? (await world.newGroup(Array.from({ length: world.size }, (_, r) => r)))! : world;
await world.barrier();
if (world.rank !== last) {
  const message = await group.barrier().then(
    () => "resolved",
    (e: Error) => `${e.name}: ${e.message}`,
  );
  console.log(`ULYSSES_TIMEOUT rank ${world.rank}: ${message}`);
} else {
  await new Promise((resolve) => setTimeout(resolve, 1500));
}
const destroyed = async (g: typeof world) =>
  g.destroy().then(
    () => "resolved",
    (e: Error) => `${e.name}: ${e.message}`,
  );
if (group !== world) console.log(`ULYSSES_DESTROY rank ${world.rank} sub-group: ${await destroyed(group)}`);
console.log(`ULYSSES_DESTROY rank ${world.rank} world: ${await destroyed(world)}`);
if (process.argv[3] === "exit") process.exit(0);
