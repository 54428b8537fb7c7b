#!/usr/bin/env node
// Compares a ZeRO-3 run under mpirun with the same flags on the threads
// backend (multihost.sh runs both): every step's loss within 1e-5 relative,
// and world rank 0 holding ceil(P / ranks) of the P weights between steps
// (its slice: a 1/ranks share), as both runs' metrics.jsonl record it
// (weightSlice, gatheredWeights). P is counted from the MPI run's checkpoint
// header. Exits 1 naming what differs.
//
// Usage: node scripts/mpi/zero3-check.mjs THREADS_OUT MPI_OUT RANKS
import fs from "node:fs";
import path from "node:path";

const [threadsDir, mpiDir, ranksText] = process.argv.slice(2);
const ranks = Number(ranksText);
if (threadsDir === undefined || mpiDir === undefined || !Number.isSafeInteger(ranks) || ranks < 2) {
  console.error("usage: node scripts/mpi/zero3-check.mjs THREADS_OUT MPI_OUT RANKS (RANKS at least 2)");
  process.exit(2);
}

const problems = [];
const rows = (dir) =>
  fs
    .readFileSync(path.join(dir, "metrics.jsonl"), "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line));

/** The weights' element count in a checkpoint: every tensor of its safetensors header but the optimizer's. */
function parameterCount(file) {
  const fd = fs.openSync(file, "r");
  try {
    const length = Buffer.alloc(8);
    fs.readSync(fd, length, 0, 8, 0);
    const headerBytes = Number(length.readBigUInt64LE(0));
    const header = Buffer.alloc(headerBytes);
    fs.readSync(fd, header, 0, headerBytes, 8);
    let count = 0;
    for (const [name, entry] of Object.entries(JSON.parse(header.toString("utf8")))) {
      if (name === "__metadata__" || name.startsWith("optimizer.")) continue;
      count += entry.shape.reduce((a, b) => a * b, 1);
    }
    return count;
  } finally {
    fs.closeSync(fd);
  }
}

const threads = rows(threadsDir);
const mpi = rows(mpiDir);
if (mpi.length === 0 || mpi.length !== threads.length) problems.push(`steps: threads ${threads.length}, mpi ${mpi.length}`);
let worst = 0;
threads.forEach((row, i) => {
  const other = mpi[i];
  if (other === undefined) return;
  const relative = Math.abs(other.loss - row.loss) / Math.abs(row.loss);
  worst = Math.max(worst, relative);
  if (!(relative <= 1e-5)) problems.push(`step ${row.step}: loss ${row.loss} (threads) vs ${other.loss} (mpi)`);
});
if (threads.length > 1 && threads[0].loss === threads[threads.length - 1].loss) problems.push("the loss did not move: nothing was trained");

const parameters = parameterCount(path.join(mpiDir, "checkpoint.safetensors"));
const share = Math.ceil(parameters / ranks);
for (const [what, run] of [
  ["threads", threads],
  ["mpi", mpi],
]) {
  for (const row of run)
    if (row.weightSlice !== share)
      problems.push(`${what} step ${row.step}: rank 0 holds ${row.weightSlice} weights, a 1/${ranks} share is ${share} of ${parameters}`);
}

if (problems.length > 0) {
  console.error(`zero3-check FAILED:\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
const gathered = mpi[0].gatheredWeights;
console.log(
  `zero3-check: ${mpi.length} steps, losses within ${worst.toExponential(1)} of the threads backend's; ` +
    `world rank 0 holds ${share} of ${parameters} weights between steps (1/${ranks}), plus ${gathered} gathered through a step (two layers' and the final norm's)`,
);
