/**
 * Benchmark of permuteInto on the all-to-all layouts, against a plain copy of
 * the same bytes (TypedArray.set) measured in the same run. Times are process
 * CPU time (user + system), median of the repetitions, which is steadier than
 * wall time on a shared machine. Prints a table and writes
 * bench-results/tensors-permute.json at the repository root. Never part of
 * `test`.
 *
 *   npx pnpm@12.4.2 --filter @ulysses/tools bench:permute
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { median } from "@ulysses/measure";
import { Tensor, permuteInto, permutedShape } from "@ulysses/tensors";

interface Case {
  name: string;
  shape: number[];
  axes: number[];
}

const CASES: Case[] = [
  // [b, N, H, D] -> [H, b, N, D]: group heads per destination rank (all-to-all send)
  { name: "a2a send", shape: [1, 8192, 8, 64], axes: [2, 0, 1, 3] },
  // [H, b, N, D] -> [b, N, H, D]: back after the exchange
  { name: "a2a back", shape: [8, 1, 8192, 64], axes: [1, 2, 0, 3] },
  { name: "a2a send D=128", shape: [1, 8192, 8, 128], axes: [2, 0, 1, 3] },
  { name: "a2a send b=2 H=16", shape: [2, 4096, 16, 64], axes: [2, 0, 1, 3] },
  { name: "a2a send D=16", shape: [1, 8192, 8, 16], axes: [2, 0, 1, 3] },
  { name: "a2a send D=8", shape: [1, 8192, 8, 8], axes: [2, 0, 1, 3] },
  // [b, N, H, D] -> [b, H, N, D]: attention layout
  { name: "to [b,H,N,D]", shape: [2, 4096, 8, 64], axes: [0, 2, 1, 3] },
  // [P, N/P, H/P, D] -> [N/P, P, H/P, D]: receive side with a rank axis
  { name: "rank axis", shape: [4, 2048, 2, 64], axes: [1, 0, 2, 3] },
  // plain matrix transpose (no contiguous inner run)
  { name: "transpose", shape: [2048, 1024], axes: [1, 0] },
];

function cpuMs(f: () => void, repetitions: number): number {
  for (let i = 0; i < 3; i++) f();
  const samples: number[] = [];
  for (let i = 0; i < repetitions; i++) {
    const start = process.cpuUsage();
    f();
    const used = process.cpuUsage(start);
    samples.push((used.user + used.system) / 1000);
  }
  return median(samples);
}

const rows = CASES.map((c) => {
  const src = new Tensor("float32", c.shape);
  for (let i = 0; i < src.size; i++) src.data[i] = i;
  const out = new Tensor("float32", permutedShape(c.shape, c.axes)); // shape comment: out.shape[i] = src.shape[axes[i]]
  const copy = new Float32Array(src.size);
  const repetitions = 25;
  const copyMs = cpuMs(() => copy.set(src.data), repetitions);
  const permuteMs = cpuMs(() => permuteInto(src, c.axes, out), repetitions);
  return {
    name: c.name,
    shape: c.shape,
    axes: c.axes,
    elements: src.size,
    permuteMs,
    copyMs,
    ratioToCopy: permuteMs / copyMs,
    gbPerSecond: (2 * src.byteLength) / (permuteMs / 1000) / 1e9,
  };
});

console.log("case                 shape               axes       elements  permute ms  copy ms  ratio  GB/s (r+w)");
for (const r of rows) {
  console.log(
    `${r.name.padEnd(20)} ${`[${r.shape.join(",")}]`.padEnd(19)} ${`[${r.axes.join(",")}]`.padEnd(10)} ${String(r.elements).padStart(8)}  ${r.permuteMs.toFixed(2).padStart(10)}  ${r.copyMs.toFixed(2).padStart(7)}  ${r.ratioToCopy.toFixed(1).padStart(5)}  ${r.gbPerSecond.toFixed(1).padStart(6)}`,
  );
}
const outDir = fileURLToPath(new URL("../../../bench-results/", import.meta.url));
mkdirSync(outDir, { recursive: true });
writeFileSync(
  `${outDir}tensors-permute.json`,
  JSON.stringify({ date: new Date().toISOString(), node: process.version, timing: "process CPU ms, median", rows }, null, 2),
);
console.log(`wrote ${outDir}tensors-permute.json`);
